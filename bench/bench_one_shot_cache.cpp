// Host cost per ge2_gemm_bias_act call when a workload cycles through W
// distinct parameter blocks (W GEMM shapes, e.g. a serving loop's token
// counts), for one-shot caches of several capacities: a hit is a look-up plus
// the execution, a miss compiles a plan. Device pointers on CUDA, host
// pointers on the CPU backend; the median over repeats of the per-call time
// of one pass over the working set, measured on the host (the call returns
// without waiting on CUDA; the stream is synchronised between passes).
//
//   bench_one_shot_cache [--json FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ge_v2_api.h"

#ifdef GE2_BENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

void check(ge2_status_t status) {
  if (status != GE2_OK) {
    std::fprintf(stderr, "bench_one_shot_cache: %s\n", ge2_last_error());
    std::exit(1);
  }
}

ge2_context_t* make_context(std::uint32_t capacity) {
  ge2_context_options_t options;
  check(ge2_context_options_init(&options));
  options.tunedb_path = "";
  options.one_shot_cache_size = capacity;
  ge2_context_t* context = nullptr;
  check(ge2_context_create(GE2_API_VERSION, &options, &context));
  return context;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
  constexpr std::int64_t kMaxM = 2048, kN = 4, kK = 4;
  ge2_context_t* probe = make_context(1);
  ge2_device_kind_t kind;
  check(ge2_context_get_device_kind(probe, &kind));
  ge2_context_destroy(probe);
  const bool cuda = kind == GE2_DEVICE_CUDA;
  std::vector<float> host(static_cast<std::size_t>(kMaxM * kK + kK * kN + kMaxM * kN), 0.5f);
  float* a = host.data();
  float* b = a + kMaxM * kK;
  float* d = b + kK * kN;
#ifdef GE2_BENCH_WITH_CUDA
  if (cuda) {
    void* device = nullptr;
    if (cudaMalloc(&device, host.size() * sizeof(float)) != cudaSuccess) return 1;
    a = static_cast<float*>(device);
    b = a + kMaxM * kK;
    d = b + kK * kN;
  }
#endif
  std::string rows = "[";
  fmt::print(
      "backend {}; f32 GEMMs M x {} x {}, M = 1..W; per-call host time, median of 5 passes\n",
      cuda ? "cuda" : "cpu", kN, kK);
  fmt::print("{:>10} {:>12} {:>14} {:>10}\n", "capacity", "working set", "us per call", "misses");
  for (std::uint32_t capacity : {256u, 1024u}) {
    for (std::int64_t working_set : {1, 256, 257, 1024, 1025}) {
      ge2_context_t* context = make_context(capacity);
      std::vector<double> per_call;
      for (int pass = 0; pass < 6; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        for (std::int64_t m = 1; m <= working_set; ++m) {
          ge2_gemm_params_t p;
          check(ge2_gemm_params_init(&p));
          p.m = m;
          p.n = kN;
          p.k = kK;
          p.dtype = GE2_DTYPE_F32;
          check(ge2_gemm_bias_act(context, &p, a, b, nullptr, d, nullptr));
        }
        const auto t1 = std::chrono::steady_clock::now();
#ifdef GE2_BENCH_WITH_CUDA
        if (cuda) cudaDeviceSynchronize();
#endif
        // The first pass fills the cache; it is not counted.
        if (pass > 0)
          per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() /
                             static_cast<double>(working_set));
      }
      std::sort(per_call.begin(), per_call.end());
      const char* text = nullptr;
      check(ge2_context_describe(context, &text));
      const std::string description = text;
      const auto at = description.find("\"misses\":");
      const long misses = at == std::string::npos ? -1 : std::stol(description.substr(at + 9));
      fmt::print("{:>10} {:>12} {:>14.2f} {:>10}\n", capacity, working_set,
                 per_call[per_call.size() / 2], misses);
      rows += fmt::format(
          "{}{{\"capacity\": {}, \"working_set\": {}, \"us_per_call_median\": {:.3f}, "
          "\"misses\": {}}}",
          rows.size() > 1 ? ", " : "", capacity, working_set, per_call[per_call.size() / 2],
          misses);
      ge2_context_destroy(context);
    }
  }
  rows += "]";
  if (!json_path.empty()) {
    std::FILE* out = std::fopen(json_path.c_str(), "w");
    if (out == nullptr) return 1;
    std::fprintf(out, "{\"backend\": \"%s\", \"rows\": %s}\n", cuda ? "cuda" : "cpu", rows.c_str());
    std::fclose(out);
  }
  return 0;
}
