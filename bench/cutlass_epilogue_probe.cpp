// cutlass_epilogue_probe: what does an activation cost in ge2's CUTLASS
// epilogue, and why? The library's instances pick the activation at run time
// (one instance for all five); run 9 measured erf GELU adding up to 155 us to a
// 192 us GEMM there. This compares, on one configuration (bf16 ping-pong
// 128x128, cluster 2x1) and the same tensors: the run-time dispatch, one
// activation compiled into the epilogue, and the libm formulas (erff, expf
// with IEEE division) against ge2's (src/core/activation.hpp). Every
// contender's output is checked against an fp64 reference on sampled rows
// (poisoned first), and the formulas are swept against fp64 on the host (with
// the host's exact exp and division standing in for the device's fast ones).
//
// Times: each contender is R launches captured in one CUDA graph; median over
// rounds of graph replays, the contenders' order rotated and reversed every
// round. One input set (A and B are re-read from L2 on small shapes).
//
//   cutlass_epilogue_probe [--rounds N] [--shapes MxNxK,...] [--json FILE]
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cuda_or_die.hpp"
#include "cutlass_epilogue_variants.hpp"

namespace {

using ge2::Activation;
using ge2::cuda::cutlass_kernels::GemmArgs;
using ge2::cuda::cutlass_kernels::GemmLauncher;

std::uint16_t to_bf16(float x) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &x, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<std::uint16_t>(bits >> 16);
}
double from_bf16(std::uint16_t h) {
  const std::uint32_t bits = std::uint32_t{h} << 16;
  float x = 0;
  std::memcpy(&x, &bits, 4);
  return x;
}

double gelu_erf_exact(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double reference_activation(Activation act, double x) {
  switch (act) {
    case Activation::Relu:
      return x > 0 ? x : 0;
    case Activation::GeluErf:
      return gelu_erf_exact(x);
    case Activation::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::Silu:
      return x / (1 + std::exp(-x));
    case Activation::None:
      break;
  }
  return x;
}

struct Contender {
  std::string variant;
  Activation act;
  GemmLauncher* launcher;
  cudaGraphExec_t graph = nullptr;
  std::vector<double> times_us;
  double rel_error = 0, max_abs_error = 0;
};

// Host accuracy of a formula against fp64 over [-12, 12]: max absolute error,
// and max relative error where |f(x)| >= 1e-6.
template <typename F>
nlohmann::json sweep(const char* name, F formula, double (*exact)(double)) {
  double max_abs = 0, max_rel = 0, at_abs = 0, at_rel = 0;
  for (double x = -12; x <= 12; x += 1.0 / 4096) {
    const double got = formula(static_cast<float>(x)), want = exact(static_cast<float>(x));
    const double abs_err = std::fabs(got - want);
    if (abs_err > max_abs) max_abs = abs_err, at_abs = x;
    if (std::fabs(want) >= 1e-6 && abs_err / std::fabs(want) > max_rel)
      max_rel = abs_err / std::fabs(want), at_rel = x;
  }
  fmt::print(
      "formula {:<16} max abs error {:.3g} (x = {:.4f}), max rel error {:.3g} (x = {:.4f})\n", name,
      max_abs, at_abs, max_rel, at_rel);
  return {{"formula", name}, {"max_abs_error", max_abs}, {"max_rel_error", max_rel}};
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 11;
  std::string json_path;
  std::vector<std::array<int, 3>> shapes = {{16384, 4096, 1024}, {4096, 11008, 4096},
                                            {4096, 4096, 4096},  {2048, 4096, 1024},
                                            {512, 1024, 512},    {128, 4096, 4096}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::max(3, std::atoi(argv[++i]));
    } else if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (arg == "--shapes" && i + 1 < argc) {
      shapes.clear();
      std::string list = argv[++i];
      for (std::size_t pos = 0; pos < list.size();) {
        std::size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        std::array<int, 3> s{};
        if (std::sscanf(list.substr(pos, end - pos).c_str(), "%dx%dx%d", &s[0], &s[1], &s[2]) !=
                3 ||
            s[0] < 1 || s[1] < 8 || s[2] < 8) {
          fmt::print(stderr, "bad shape '{}' (MxNxK, N and K >= 8)\n", list.substr(pos, end - pos));
          return 2;
        }
        shapes.push_back(s);
        pos = end + 1;
      }
    } else {
      fmt::print(stderr, "usage: {} [--rounds N] [--shapes MxNxK,...] [--json FILE]\n", argv[0]);
      return 2;
    }
  }

  nlohmann::json report = {{"formulas", nlohmann::json::array()},
                           {"results", nlohmann::json::array()}};
  auto silu_exact = [](double x) { return x / (1 + std::exp(-x)); };
  report["formulas"].push_back(sweep("gelu_erf (ge2)", ge2::GeluErf{}, gelu_erf_exact));
  report["formulas"].push_back(sweep("gelu_erf (erff)", ge2::probe::LibmGeluErf{}, gelu_erf_exact));
  report["formulas"].push_back(
      sweep("gelu_erf (A&S)", ge2::probe::AbramowitzStegunGeluErf{}, gelu_erf_exact));
  report["formulas"].push_back(
      sweep("gelu_erf (sigm. 4)", ge2::probe::SigmoidGeluErf4{}, gelu_erf_exact));
  report["formulas"].push_back(sweep("silu (ge2)", ge2::Silu{}, +silu_exact));
  report["formulas"].push_back(sweep(
      "gelu_tanh (ge2)", ge2::GeluTanh{}, +[](double x) {
        return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      }));

  int device = 0, sm_count = 0;
  if (cudaGetDeviceCount(&device) != cudaSuccess || device == 0) {
    fmt::print("SKIPPED: no CUDA device (the host formula sweep above ran)\n");
    return 0;
  }
  device = 0;
  CUDA_OR_DIE(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp props{};
  CUDA_OR_DIE(cudaGetDeviceProperties(&props, device));
  if (props.major != 9 || props.minor != 0) {
    fmt::print("SKIPPED: sm_90a kernels need compute capability 9.0 (this is {}.{})\n", props.major,
               props.minor);
    return 0;
  }
  report["device"] = props.name;

  struct Variant {
    const char* name;
    std::unique_ptr<GemmLauncher> launcher;
    std::vector<Activation> acts;
  };
  std::vector<Variant> variants;
  variants.push_back({"runtime",
                      ge2::probe::make_runtime(),
                      {Activation::None, Activation::Relu, Activation::GeluErf,
                       Activation::GeluTanh, Activation::Silu}});
  variants.push_back(
      {"compiled_identity", ge2::probe::make_compiled_identity(), {Activation::None}});
  variants.push_back(
      {"compiled_gelu_tanh", ge2::probe::make_compiled_gelu_tanh(), {Activation::GeluTanh}});
  variants.push_back(
      {"compiled_gelu_erf", ge2::probe::make_compiled_gelu_erf(), {Activation::GeluErf}});
  variants.push_back(
      {"compiled_libm_gelu_erf", ge2::probe::make_compiled_libm_gelu_erf(), {Activation::GeluErf}});
  variants.push_back(
      {"compiled_as_gelu_erf", ge2::probe::make_compiled_as_gelu_erf(), {Activation::GeluErf}});
  variants.push_back({"compiled_sigmoid4_gelu_erf",
                      ge2::probe::make_compiled_sigmoid4_gelu_erf(),
                      {Activation::GeluErf}});
  variants.push_back({"compiled_silu", ge2::probe::make_compiled_silu(), {Activation::Silu}});
  variants.push_back(
      {"compiled_libm_silu", ge2::probe::make_compiled_libm_silu(), {Activation::Silu}});

  cudaStream_t stream = nullptr;
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_OR_DIE(cudaEventCreate(&start));
  CUDA_OR_DIE(cudaEventCreate(&stop));
  void* workspace = nullptr;
  const std::size_t workspace_bytes = std::size_t{64} << 20;
  CUDA_OR_DIE(cudaMalloc(&workspace, workspace_bytes));
  std::mt19937_64 rng(20261203);

  for (const auto& [m, n, k] : shapes) {
    const std::size_t a_elems = std::size_t(m) * k, b_elems = std::size_t(n) * k,
                      d_elems = std::size_t(m) * n;
    std::vector<std::uint16_t> a(a_elems), b(b_elems), bias(static_cast<std::size_t>(n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Pre-activations of a few units: the activations' interesting range.
    const float scale = 2.0f / std::sqrt(static_cast<float>(k));
    for (auto& x : a) x = to_bf16(normal(rng));
    for (auto& x : b) x = to_bf16(normal(rng) * scale);
    for (auto& x : bias) x = to_bf16(normal(rng));
    void *da = nullptr, *db = nullptr, *dbias = nullptr, *dd = nullptr;
    CUDA_OR_DIE(cudaMalloc(&da, a_elems * 2));
    CUDA_OR_DIE(cudaMalloc(&db, b_elems * 2));
    CUDA_OR_DIE(cudaMalloc(&dbias, static_cast<std::size_t>(n) * 2));
    CUDA_OR_DIE(cudaMalloc(&dd, d_elems * 2));
    CUDA_OR_DIE(cudaMemcpy(da, a.data(), a_elems * 2, cudaMemcpyHostToDevice));
    CUDA_OR_DIE(cudaMemcpy(db, b.data(), b_elems * 2, cudaMemcpyHostToDevice));
    CUDA_OR_DIE(
        cudaMemcpy(dbias, bias.data(), static_cast<std::size_t>(n) * 2, cudaMemcpyHostToDevice));
    GemmArgs base;
    base.m = m, base.n = n, base.k = k;
    base.a = da, base.lda = k, base.b = db, base.ldb = k, base.d = dd, base.ldd = n;
    base.bias = dbias, base.device = device, base.sm_count = sm_count;

    // Sampled rows of the fp64 pre-activation, shared by every contender.
    std::vector<int> rows;
    for (int i = 0; i < std::min(m, 12); ++i)
      rows.push_back(static_cast<int>((std::int64_t(i) * 7919) % m));
    rows.push_back(m - 1);
    std::vector<double> pre(rows.size() * static_cast<std::size_t>(n));
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (int j = 0; j < n; ++j) {
        double sum = from_bf16(bias[static_cast<std::size_t>(j)]);
        const std::uint16_t* arow = &a[std::size_t(rows[r]) * k];
        const std::uint16_t* brow = &b[std::size_t(j) * k];
        for (int p = 0; p < k; ++p) sum += from_bf16(arow[p]) * from_bf16(brow[p]);
        pre[r * n + j] = sum;
      }

    std::vector<Contender> contenders;
    for (auto& v : variants)
      for (Activation act : v.acts) contenders.push_back({v.name, act, v.launcher.get()});
    // Correctness first: poisoned D, one run, sampled rows against fp64.
    std::vector<std::uint16_t> row_out(static_cast<std::size_t>(n));
    for (auto& c : contenders) {
      GemmArgs g = base;
      g.activation = static_cast<int>(c.act);
      CUDA_OR_DIE(cudaMemsetAsync(dd, 0xFF, d_elems * 2, stream));
      const std::string failure = c.launcher->launch(g, workspace, workspace_bytes, stream);
      if (!failure.empty()) {
        fmt::print(stderr, "{} {}: {}\n", c.variant, ge2::activation_name(c.act), failure);
        return 1;
      }
      CUDA_OR_DIE(cudaStreamSynchronize(stream));
      double err2 = 0, ref2 = 0;
      for (std::size_t r = 0; r < rows.size(); ++r) {
        CUDA_OR_DIE(cudaMemcpy(row_out.data(),
                               static_cast<std::uint16_t*>(dd) + std::size_t(rows[r]) * n,
                               static_cast<std::size_t>(n) * 2, cudaMemcpyDeviceToHost));
        for (int j = 0; j < n; ++j) {
          const double want = reference_activation(c.act, pre[r * n + j]);
          const double got = from_bf16(row_out[static_cast<std::size_t>(j)]);
          const double diff = std::isfinite(got) ? got - want : 1e30;
          err2 += diff * diff;
          ref2 += want * want;
          c.max_abs_error = std::max(c.max_abs_error, std::fabs(diff));
        }
      }
      c.rel_error = std::sqrt(err2 / std::max(ref2, 1e-300));
      // Capture R launches; R sized for about 2 ms per replay.
      cudaEventRecord(start, stream);
      c.launcher->launch(g, workspace, workspace_bytes, stream);
      cudaEventRecord(stop, stream);
      CUDA_OR_DIE(cudaEventSynchronize(stop));
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      const int reps = std::clamp(static_cast<int>(2.0 / std::max(ms, 0.001f)), 5, 200);
      cudaGraph_t graph = nullptr;
      CUDA_OR_DIE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int r = 0; r < reps; ++r) c.launcher->launch(g, workspace, workspace_bytes, stream);
      CUDA_OR_DIE(cudaStreamEndCapture(stream, &graph));
      CUDA_OR_DIE(cudaGraphInstantiate(&c.graph, graph, 0));
      CUDA_OR_DIE(cudaGraphDestroy(graph));
      c.times_us.assign(1, reps);  // the first entry holds reps until timing
    }
    std::vector<int> reps(contenders.size());
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      reps[i] = static_cast<int>(contenders[i].times_us[0]);
      contenders[i].times_us.clear();
      CUDA_OR_DIE(cudaGraphLaunch(contenders[i].graph, stream));  // warm-up
    }
    CUDA_OR_DIE(cudaStreamSynchronize(stream));
    for (int round = 0; round < rounds; ++round) {
      std::vector<std::size_t> order(contenders.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = (i + round) % order.size();
      if (round % 2 == 1) std::reverse(order.begin(), order.end());
      for (std::size_t i : order) {
        CUDA_OR_DIE(cudaEventRecord(start, stream));
        CUDA_OR_DIE(cudaGraphLaunch(contenders[i].graph, stream));
        CUDA_OR_DIE(cudaEventRecord(stop, stream));
        CUDA_OR_DIE(cudaEventSynchronize(stop));
        float ms = 0;
        CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, stop));
        contenders[i].times_us.push_back(ms * 1e3 / reps[i]);
      }
    }
    fmt::print("\n{}x{}x{} (bf16, ping-pong 128x128, bias, median of {} rounds)\n", m, n, k,
               rounds);
    double identity_us = 0;
    for (auto& c : contenders) {
      std::sort(c.times_us.begin(), c.times_us.end());
      const double median = c.times_us[c.times_us.size() / 2];
      if (c.variant == std::string("runtime") && c.act == Activation::None) identity_us = median;
      fmt::print("  {:<24} {:<10} {:9.1f} us  (+{:6.1f})  rel err {:.2e}  max abs err {:.2e}{}\n",
                 c.variant, ge2::activation_name(c.act), median, median - identity_us, c.rel_error,
                 c.max_abs_error, c.rel_error <= 1e-2 ? "" : "  WRONG");
      report["results"].push_back({{"m", m},
                                   {"n", n},
                                   {"k", k},
                                   {"variant", c.variant},
                                   {"activation", ge2::activation_name(c.act)},
                                   {"median_us", median},
                                   {"rel_error", c.rel_error},
                                   {"max_abs_error", c.max_abs_error}});
      cudaGraphExecDestroy(c.graph);
    }
    cudaFree(da), cudaFree(db), cudaFree(dbias), cudaFree(dd);
  }
  if (!json_path.empty()) std::ofstream(json_path) << report.dump(1) << "\n";
  return 0;
}
