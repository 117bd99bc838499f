// elementwise_probe: which geometry of the flat elementwise pass
// (src/backends/cuda/elementwise_flat.cuh: threads per block x vectors in flight
// per thread) runs the erf-GELU pass after a GEMM fastest? The pass runs in place,
// as a plan runs it on a GEMM's D: "warm" repeats it on one buffer (a D up to
// about half of L2 stays there, as it does right after its GEMM), "cold" rotates
// through copies that span 4x L2. Each variant runs R launches between two
// events (bench/group_timer.hpp); median of rounds, order rotated and reversed
// every round. Every
// variant's output must equal the first one's bit for bit (same formula).
// Built on request: cmake --build build --target elementwise_probe.
//
//   elementwise_probe [--rounds N] [--json FILE] [--rows 16,512,...] [--cols 11008,...]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/elementwise_flat.cuh"
#include "cuda_or_die.hpp"
#include "cutlass_epilogue_variants.hpp"  // the erf GELU candidates
#include "group_timer.hpp"

namespace {

using namespace ge2;
using namespace ge2::cuda;

struct Variant {
  std::string name;
  std::function<void(const flat::Params&, cudaStream_t)> launch;
};

template <typename T, typename Op, int kThreads, int kUnroll>
Variant variant() {
  return {fmt::format("{}x{}", kThreads, kUnroll), [](const flat::Params& p, cudaStream_t s) {
            CUDA_OR_DIE((flat::launch<T, flat::Config<kThreads, kUnroll>>(p, Op{}, s, false)));
          }};
}

// The library's geometry (128 x 1) and the former one (256 x 4) among their neighbours.
template <typename T, typename Op>
std::vector<Variant> variants() {
  return {variant<T, Op, 256, 4>(), variant<T, Op, 256, 2>(), variant<T, Op, 256, 1>(),
          variant<T, Op, 128, 1>(), variant<T, Op, 128, 2>(), variant<T, Op, 512, 1>()};
}

template <typename T>
T from(float v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half(v);
  else
    return __float2bfloat16(v);
}

struct Options {
  int rounds = 9;
  std::vector<long long> rows = {16, 512, 1024, 2048, 4096};
  std::vector<long long> cols = {11008};
};

template <typename T, typename Op>
void probe_op(const char* dtype, const char* op_name, const Options& o, const cudaDeviceProp& props,
              cudaStream_t stream, nlohmann::json& out) {
  const auto vs = variants<T, Op>();
  GroupTimer timer;
  std::mt19937 engine(11);
  std::normal_distribution<float> normal(0.f, 2.f);
  for (long long cols : o.cols)
    for (long long rows : o.rows) {
      const long long elements = rows * cols;
      const std::size_t bytes = elements * sizeof(T);
      std::vector<T> host(elements);
      for (auto& v : host) v = from<T>(normal(engine));
      const int copies = static_cast<int>(
          std::max<std::size_t>(2, (4 * std::size_t(props.l2CacheSize)) / bytes + 1));
      std::vector<void*> bufs(copies);
      for (auto& b : bufs) {
        CUDA_OR_DIE(cudaMalloc(&b, bytes));
        CUDA_OR_DIE(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
      }
      void *src, *dst;
      CUDA_OR_DIE(cudaMalloc(&src, bytes));
      CUDA_OR_DIE(cudaMalloc(&dst, bytes));
      CUDA_OR_DIE(cudaMemcpy(src, host.data(), bytes, cudaMemcpyHostToDevice));
      auto params = [&](const void* x, void* y) {
        return flat::Params{x,
                            nullptr,
                            nullptr,
                            y,
                            elements * static_cast<long long>(sizeof(T)) / 16,
                            cols * static_cast<long long>(sizeof(T)) / 16,
                            false};
      };
      std::vector<unsigned char> first(bytes), got(bytes);
      std::vector<bool> same(vs.size(), true);
      for (std::size_t v = 0; v < vs.size(); ++v) {
        CUDA_OR_DIE(cudaMemsetAsync(dst, 0xff, bytes, stream));
        vs[v].launch(params(src, dst), stream);
        CUDA_OR_DIE(cudaGetLastError());  // a launch that fails would time as a few microseconds
        CUDA_OR_DIE(cudaMemcpyAsync(v ? got.data() : first.data(), dst, bytes,
                                    cudaMemcpyDeviceToHost, stream));
        CUDA_OR_DIE(cudaStreamSynchronize(stream));
        if (v) same[v] = got == first;
      }
      for (const char* mode : {"warm", "cold"}) {
        const bool warm = !std::strcmp(mode, "warm");
        std::vector<std::vector<double>> times(vs.size());
        const int reps = 20;
        for (int round = 0; round < o.rounds; ++round) {
          for (std::size_t v : rotated_order(vs.size(), round)) {
            // The in-place pass changes its buffer: reload it so every round sees the same data.
            for (auto& b : bufs)
              CUDA_OR_DIE(cudaMemcpyAsync(b, src, bytes, cudaMemcpyDeviceToDevice, stream));
            if (warm) vs[v].launch(params(bufs[0], bufs[0]), stream);
            times[v].push_back(timer.time_group(
                [&](int r) {
                  void* b = bufs[warm ? 0 : r % copies];
                  vs[v].launch(params(b, b), stream);
                },
                reps, 0, stream));
          }
        }
        nlohmann::json row = {
            {"dtype", dtype}, {"op", op_name}, {"rows", rows}, {"cols", cols}, {"mode", mode}};
        std::string line = fmt::format("{} {} {:5d}x{:5d} {}:", dtype, op_name, rows, cols, mode);
        for (std::size_t v = 0; v < vs.size(); ++v) {
          const double us = median_of(times[v]);
          row["variants"][vs[v].name] = {
              {"us", us}, {"gbs", 2.0 * bytes / (us * 1e3)}, {"same", bool(same[v])}};
          line += fmt::format("  {} {:.2f}{}", vs[v].name, us, same[v] ? "" : " MISMATCH");
        }
        fmt::print("{}\n", line);
        out.push_back(row);
      }
      for (void* b : bufs) CUDA_OR_DIE(cudaFree(b));
      CUDA_OR_DIE(cudaFree(src));
      CUDA_OR_DIE(cudaFree(dst));
    }
}

std::vector<long long> parse_list(char* text) {
  std::vector<long long> values;
  for (char* item = std::strtok(text, ","); item; item = std::strtok(nullptr, ","))
    values.push_back(std::max(1LL, std::atoll(item)));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) o.rounds = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) o.rows = parse_list(argv[++i]);
    if (!std::strcmp(argv[i], "--cols") && i + 1 < argc) o.cols = parse_list(argv[++i]);
  }
  for (long long c : o.cols)
    if (c % 8) {
      fmt::print(stderr,
                 "--cols: {} is not a multiple of 8 (the flat pass takes 16-byte vectors)\n", c);
      return 2;
    }
  cudaDeviceProp props{};
  CUDA_OR_DIE(cudaGetDeviceProperties(&props, 0));
  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  nlohmann::json rows = nlohmann::json::array();
  probe_op<__half, FixedOp<Identity, 0, GeluErf>>("f16", "gelu_erf", o, props, stream, rows);
  probe_op<__nv_bfloat16, FixedOp<Identity, 0, GeluErf>>("bf16", "gelu_erf", o, props, stream,
                                                         rows);
  // The erf GELU formula before session 22, for comparison (bench/cutlass_epilogue_variants.hpp).
  using Before = probe::AbramowitzStegunGeluErf;
  probe_op<__half, FixedOp<Identity, 0, Before>>("f16", "gelu_erf_as", o, props, stream, rows);
  probe_op<__nv_bfloat16, FixedOp<Identity, 0, Before>>("bf16", "gelu_erf_as", o, props, stream,
                                                        rows);
  if (!json_path.empty())
    std::ofstream(json_path) << nlohmann::json{{"device", props.name}, {"rows", rows}}.dump(1);
  return 0;
}
