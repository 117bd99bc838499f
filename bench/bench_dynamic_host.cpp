// Host cost of one execution of a dynamic plan (ge2_plan_execute_dynamic)
// against a plan compiled for that exact extent (ge2_plan_execute), on an FFN
// block small enough that the host is what is measured: x [M, 64] -> GELU
// MLP (64 -> 128 -> 64, biases, residual), f16 on CUDA (device pointers, work
// queued without waiting) and f32 on the CPU backend (host pointers, the tiny
// compute included in both). Also the first execution at a new extent, which
// builds that extent's steps, beside the exact plan's compile and first
// execution (synchronised). Median over repeats of the per-call time of
// back-to-back calls; the contenders alternate repeat by repeat.
//
//   bench_dynamic_host [--json FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ge_v2_api.h"

#ifdef GE2_BENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

constexpr std::int64_t kBound = 512, kHidden = 64, kInter = 128;
// Every byte of inputs and weights: 0.0115 in f32, 1.06 in f16, so no product is
// subnormal (0x1c, used before, made f32 products of 1e-43, and the CPU backend's
// timings measured subnormal arithmetic, ~10 ns a multiply-add).
constexpr unsigned char kFill = 0x3c;

void check(ge2_status_t status) {
  if (status != GE2_OK) {
    std::fprintf(stderr, "bench_dynamic_host: %s\n", ge2_last_error());
    std::exit(1);
  }
}

// The block with x's rows dynamic up to kBound (rows == 0) or fixed at `rows`.
ge2_plan_t* compile_block(ge2_context_t* context, ge2_dtype_t dtype, std::int64_t rows) {
  ge2_graph_t* graph = nullptr;
  check(ge2_graph_create(&graph));
  const std::size_t element = dtype == GE2_DTYPE_F32 ? 4 : 2;
  std::vector<unsigned char> bytes(static_cast<std::size_t>(kHidden * kInter) * element, kFill);
  const ge2_tensor_desc_t x_desc{dtype, 2, {rows ? rows : kBound, kHidden}, {0, 0}},
      w1{dtype, 2, {kInter, kHidden}, {0, 0}}, w2{dtype, 2, {kHidden, kInter}, {0, 0}},
      b1{dtype, 1, {kInter}, {0}}, b2{dtype, 1, {kHidden}, {0}};
  ge2_value_t x, vw1, vw2, vb1, vb2, h, y;
  check(rows ? ge2_graph_add_input(graph, "x", &x_desc, &x)
             : ge2_graph_add_dynamic_input(graph, "x", &x_desc, &x));
  check(ge2_graph_add_constant(graph, "w1", &w1, bytes.data(), &vw1));
  check(ge2_graph_add_constant(graph, "w2", &w2, bytes.data(), &vw2));
  check(ge2_graph_add_constant(graph, "b1", &b1, bytes.data(), &vb1));
  check(ge2_graph_add_constant(graph, "b2", &b2, bytes.data(), &vb2));
  ge2_gemm_attrs_t linear;
  check(ge2_gemm_attrs_init(&linear));
  linear.trans_b = 1;
  check(ge2_graph_add_gemm_bias_act(graph, x, vw1, vb1, &linear, GE2_ACT_GELU_ERF, &h));
  check(ge2_graph_add_gemm_bias_act(graph, h, vw2, vb2, &linear, GE2_ACT_NONE, &y));
  check(ge2_graph_add_elementwise(graph, GE2_ELEMENTWISE_ADD, y, x, &y));
  check(ge2_graph_mark_output(graph, y, "y", nullptr));
  ge2_plan_t* plan = nullptr;
  check(ge2_plan_compile(context, graph, nullptr, &plan));
  ge2_graph_destroy(graph);
  return plan;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
  ge2_context_options_t options;
  check(ge2_context_options_init(&options));
  options.tunedb_path = "";
  ge2_context_t* context = nullptr;
  check(ge2_context_create(GE2_API_VERSION, &options, &context));
  ge2_device_kind_t kind;
  check(ge2_context_get_device_kind(context, &kind));
  const bool cuda = kind == GE2_DEVICE_CUDA;
  const ge2_dtype_t dtype = cuda ? GE2_DTYPE_F16 : GE2_DTYPE_F32;
  const std::size_t bytes = static_cast<std::size_t>(kBound * kHidden) * (cuda ? 2 : 4);
  std::vector<unsigned char> host_x(bytes, kFill), host_y(bytes);
  void* x = host_x.data();
  void* y = host_y.data();
#ifdef GE2_BENCH_WITH_CUDA
  if (cuda) {
    if (cudaMalloc(&x, bytes) != cudaSuccess || cudaMalloc(&y, bytes) != cudaSuccess) return 1;
    cudaMemset(x, kFill, bytes);
  }
  auto sync = [&] {
    if (cuda) cudaDeviceSynchronize();
  };
#else
  auto sync = [] {};
#endif
  const ge2_binding_t bindings[] = {{"x", x}, {"y", y}};
  ge2_plan_t* dynamic = compile_block(context, dtype, 0);
  std::string json = "[";
  std::printf("%-8s %14s %14s %14s %18s %16s %16s\n", "extent", "dynamic us", "fixed us",
              "difference", "dyn. first us", "fixed compile", "fixed first us");
  for (std::int64_t extent : {1, 8, 100, 512}) {
    // The exact plan's compile and first execution come first, so the kernels
    // are loaded (CUDA loads modules lazily) when the dynamic plan first runs
    // this extent: what that call costs more is building the extent's steps.
    auto elapsed_us = [](auto start) {
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
          .count();
    };
    auto start = std::chrono::steady_clock::now();
    ge2_plan_t* fixed = compile_block(context, dtype, extent);
    const double compile_us = elapsed_us(start);
    start = std::chrono::steady_clock::now();
    check(ge2_plan_execute(fixed, bindings, 2, nullptr));
    sync();
    const double fixed_first_us = elapsed_us(start);
    start = std::chrono::steady_clock::now();
    check(ge2_plan_execute_dynamic(dynamic, extent, bindings, 2, nullptr));
    sync();
    const double first_us = elapsed_us(start);
    // Fewer calls where the CPU backend's compute grows with the extent.
    const int kCalls = cuda ? 2000
                            : static_cast<int>(std::max<std::int64_t>(4, 2000 / (extent * extent))),
              kRepeats = 15;
    std::vector<double> dynamic_us, fixed_us;
    for (int repeat = 0; repeat < kRepeats; ++repeat)
      for (int which = 0; which < 2; ++which) {
        const bool run_dynamic = (which == 0) == (repeat % 2 == 0);
        const auto start = std::chrono::steady_clock::now();
        for (int call = 0; call < kCalls; ++call)
          check(run_dynamic ? ge2_plan_execute_dynamic(dynamic, extent, bindings, 2, nullptr)
                            : ge2_plan_execute(fixed, bindings, 2, nullptr));
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count() /
            kCalls;
        sync();
        (run_dynamic ? dynamic_us : fixed_us).push_back(us);
      }
    const double d = median(dynamic_us), f = median(fixed_us);
    std::printf("%-8lld %14.2f %14.2f %+14.2f %18.1f %16.1f %16.1f\n",
                static_cast<long long>(extent), d, f, d - f, first_us, compile_us, fixed_first_us);
    json += fmt::format(
        R"({}{{"extent": {}, "dynamic_us": {:.3f}, "fixed_us": {:.3f}, "first_call_us": {:.1f}, )"
        R"("fixed_compile_us": {:.1f}, "fixed_first_call_us": {:.1f}}})",
        json.size() > 1 ? ", " : "", extent, d, f, first_us, compile_us, fixed_first_us);
    ge2_plan_destroy(fixed);
  }
  json += "]";
  std::printf("backend %s; the block runs as two GEMM steps (the residual fused as C)\n",
              cuda ? "CUDA (f16, device pointers)" : "CPU (f32, host pointers)");
  if (!json_path.empty()) {
    FILE* out = std::fopen(json_path.c_str(), "w");
    if (out) {
      std::fprintf(out, "{\"backend\": \"%s\", \"rows\": %s}\n", cuda ? "cuda" : "cpu",
                   json.c_str());
      std::fclose(out);
    }
  }
  ge2_plan_destroy(dynamic);
  ge2_context_destroy(context);
#ifdef GE2_BENCH_WITH_CUDA
  if (cuda) {
    cudaFree(x);
    cudaFree(y);
  }
#endif
  return 0;
}
