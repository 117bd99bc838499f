// skinny_probe: which configuration of the cuda_skinny kernel streams a weight
// fastest for 1-16 rows? The CUDA-core form (src/backends/cuda/skinny_gemm.cuh:
// warps per block x columns per warp x vectors in flight per column) against
// the tensor-core form (skinny_mma.cuh: warps per block x 8-column tiles per
// block x steps in flight per warp, "contiguous": a warp's steps in flight are
// consecutive along K rather than interleaved with the other warps'; "split S": K split over S
// blocks per column tile, "min B": compiled for B blocks per SM), beside a kernel that only reads
// B ("read B": the rate this device streams it at), fp16, on FFN weights of
// 7B-70B models. Each variant runs R launches between two events over weights rotated through more
// memory than L2 holds; median of rounds, order rotated and reversed every round. Every variant's
// output is compared with the first one's. Built on request: cmake --build build --target
// skinny_probe; gpu-check.sh skinny runs it.
//
//   skinny_probe [--rounds N] [--json FILE] [--rows 1,2,4,8,16] [--shapes NxK,...]
//                [--only NAME,...]   (variants whose name contains one of these; the first stays)
#include <cuda_fp16.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/skinny_mma.cuh"
#include "cuda_or_die.hpp"
#include "group_timer.hpp"

namespace {

using namespace ge2::cuda::skinny;

struct Variant {
  std::string name;
  std::function<void(const Params&, cudaStream_t)> launch;
  bool reference = false;  // reads B without computing D: the rate to compare with
};

// Every 16-byte vector of B read once, kInFlight per thread at a time, on
// kBlocksPerSm blocks of 256 threads per SM: how fast this device streams B.
template <int kInFlight>
__global__ void read_kernel(const uint4* b, long long vectors, unsigned* sink) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  unsigned x = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < vectors;
       i += kInFlight * stride) {
    uint4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      v[u] = i + u * stride < vectors ? __ldcs(b + i + u * stride) : uint4{};
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (x == 0x9e3779b9u) *sink = x;  // keeps the loads
}

template <int kInFlight, int kBlocksPerSm>
Variant read_variant(int sm_count, unsigned* sink) {
  return {fmt::format("read B {}x{}", kInFlight, kBlocksPerSm),
          [sm_count, sink](const Params& p, cudaStream_t s) {
            read_kernel<kInFlight><<<sm_count * kBlocksPerSm, 256, 0, s>>>(
                static_cast<const uint4*>(p.b), static_cast<long long>(p.n) * p.k / 8, sink);
          },
          true};
}

template <int W, int C, int U>
Variant variant() {
  return {fmt::format("core {}w x {}c x {}u", W, C, U), [](const Params& p, cudaStream_t s) {
            CUDA_OR_DIE((launch<__half, Config<W, C, U>, 16>(p, 1, s)));
          }};
}

template <int W, int T, int U, bool C = false>
Variant mma_variant() {
  return {fmt::format("mma {}w x {}t x {}u{}", W, T, U, C ? " contiguous" : ""),
          [](const Params& p, cudaStream_t s) {
            CUDA_OR_DIE((launch_mma<__half, MmaConfig<W, T, U, C>>(p, 1, s)));
          }};
}

// K split over `S` blocks per column tile (Params::splits), or at least `MinBlocks` blocks per SM.
template <int W, int T, int U, int S, int MinBlocks = 1>
Variant split_variant() {
  return {fmt::format("mma {}w x {}t x {}u split {}{}", W, T, U, S,
                      MinBlocks > 1 ? fmt::format(" min {}", MinBlocks) : ""),
          [](const Params& p, cudaStream_t s) {
            Params q = p;
            q.splits = S;
            if (S > 1)  // as launch_skinny_gemm does: the tile counters start from zero
              CUDA_OR_DIE(cudaMemsetAsync(q.counters, 0, sizeof(unsigned) * ((q.n + 15) / 16), s));
            CUDA_OR_DIE((launch_mma<__half, MmaConfig<W, T, U, false, MinBlocks>>(q, 1, s)));
          }};
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 9;
  std::string json_path;
  std::vector<int> row_counts = {1, 2, 4, 8, 16};
  std::vector<std::pair<int, int>> shapes = {{4096, 4096},  {11008, 4096}, {4096, 11008},
                                             {14336, 4096}, {4096, 14336}, {8192, 8192},
                                             {57344, 8192}, {8192, 28672}};  // (N, K)
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc) {
      shapes.clear();
      for (char* item = std::strtok(argv[++i], ","); item; item = std::strtok(nullptr, ",")) {
        int n = 0, k = 0;
        if (std::sscanf(item, "%dx%d", &n, &k) == 2 && n > 0 && k > 0 && k % 8 == 0)
          shapes.emplace_back(n, k);
      }
    }
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      for (char* item = std::strtok(argv[++i], ","); item; item = std::strtok(nullptr, ","))
        only.emplace_back(item);
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
      row_counts.clear();
      for (char* item = std::strtok(argv[++i], ","); item; item = std::strtok(nullptr, ","))
        row_counts.push_back(std::clamp(std::atoi(item), 1, 16));
    }
  }
  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  GroupTimer timer;
  cudaDeviceProp props{};
  CUDA_OR_DIE(cudaGetDeviceProperties(&props, 0));
  // The split variants' fp32 partial sums and tile counters, for the largest shape.
  constexpr int kMaxSplits = 8;
  int max_n = 0;
  for (auto [n, k] : shapes) max_n = std::max(max_n, n);
  float* partial;
  unsigned *counters, *sink;
  CUDA_OR_DIE(cudaMalloc(&partial, sizeof(float) * kMaxSplits * 16 * max_n));
  CUDA_OR_DIE(cudaMalloc(&counters, sizeof(unsigned) * max_n));
  CUDA_OR_DIE(cudaMemset(counters, 0, sizeof(unsigned) * max_n));
  CUDA_OR_DIE(cudaMalloc(&sink, sizeof(unsigned)));
  const int sms = props.multiProcessorCount;
  std::vector<Variant> variants = {variant<8, 2, 2>(),
                                   mma_variant<8, 2, 4>(),
                                   mma_variant<8, 4, 4>(),
                                   read_variant<4, 4>(sms, sink),
                                   read_variant<8, 8>(sms, sink),
                                   split_variant<8, 2, 4, 1, 4>(),
                                   split_variant<8, 2, 4, 2>(),
                                   split_variant<8, 2, 4, 3>(),
                                   split_variant<8, 2, 4, 4>(),
                                   split_variant<8, 2, 4, 8>(),
                                   split_variant<8, 4, 4, 2>(),
                                   split_variant<8, 4, 4, 4>()};
  if (!only.empty())
    variants.erase(std::remove_if(variants.begin() + 1, variants.end(),
                                  [&](const Variant& v) {
                                    return std::none_of(
                                        only.begin(), only.end(), [&](const std::string& o) {
                                          return v.name.find(o) != std::string::npos;
                                        });
                                  }),
                   variants.end());
  nlohmann::json rows = nlohmann::json::array();
  std::mt19937 engine(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (auto [n, k] : shapes) {
    const std::size_t b_bytes = std::size_t(n) * k * 2;
    const int copies = static_cast<int>(
        std::max<std::size_t>(2, (4 * std::size_t(props.l2CacheSize) + b_bytes - 1) / b_bytes));
    std::vector<__half> host(std::size_t(n) * k);
    for (auto& v : host) v = __float2half(uniform(engine) / std::sqrt(float(k)));
    std::vector<void*> bs(copies);
    for (auto& b : bs) {
      CUDA_OR_DIE(cudaMalloc(&b, b_bytes));
      CUDA_OR_DIE(cudaMemcpy(b, host.data(), b_bytes, cudaMemcpyHostToDevice));
    }
    std::vector<__half> a_host(16 * std::size_t(k));
    for (auto& v : a_host) v = __float2half(uniform(engine));
    void *a, *d, *d0;
    CUDA_OR_DIE(cudaMalloc(&a, a_host.size() * 2));
    CUDA_OR_DIE(cudaMemcpy(a, a_host.data(), a_host.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OR_DIE(cudaMalloc(&d, 16 * std::size_t(n) * 2));
    CUDA_OR_DIE(cudaMalloc(&d0, 16 * std::size_t(n) * 2));
    for (int m : row_counts) {
      Params p{};
      p.a = a;
      p.m = m;
      p.n = n;
      p.k = k;
      p.lda = p.ldb = k;
      p.ldd = n;
      p.alpha = 1.f;
      p.act = 0;
      p.partial = partial;
      p.counters = counters;
      auto with = [&](int copy, void* out) {
        Params q = p;
        q.b = bs[copy % copies];
        q.d = out;
        return q;
      };
      variants[0].launch(with(0, d0), stream);
      std::vector<std::vector<double>> times(variants.size());
      std::vector<double> difference(variants.size(), 0);
      std::vector<__half> ref(std::size_t(m) * n), got(std::size_t(m) * n);
      CUDA_OR_DIE(cudaMemcpyAsync(ref.data(), d0, ref.size() * 2, cudaMemcpyDeviceToHost, stream));
      for (std::size_t v = 0; v < variants.size(); ++v) {
        variants[v].launch(with(0, d), stream);
        CUDA_OR_DIE(cudaGetLastError());  // a launch that fails would time as a few microseconds
        CUDA_OR_DIE(cudaMemcpyAsync(got.data(), d, got.size() * 2, cudaMemcpyDeviceToHost, stream));
        CUDA_OR_DIE(cudaStreamSynchronize(stream));
        double num = 0, den = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double r = __half2float(ref[i]), g = __half2float(got[i]);
          num += (g - r) * (g - r);
          den += r * r;
        }
        difference[v] = std::sqrt(num / std::max(den, 1e-30));
      }
      const int reps = 20;
      for (int round = 0; round < rounds; ++round) {
        for (std::size_t v : rotated_order(variants.size(), round))
          times[v].push_back(timer.time_group(
              [&](int r) { variants[v].launch(with(r, d), stream); }, reps, 0, stream));
      }
      nlohmann::json row = {{"m", m}, {"n", n}, {"k", k}};
      std::string line = fmt::format("{:2d}x{:5d}x{:5d}:", m, n, k);
      for (std::size_t v = 0; v < variants.size(); ++v) {
        const double us = median_of(times[v]);
        const double gbs = (b_bytes + 2.0 * m * (k + n)) / (us * 1e3);
        row["variants"][variants[v].name] = {
            {"us", us}, {"gbs", gbs}, {"difference", difference[v]}};
        line += fmt::format("  {} {:6.1f} us {:5.0f} GB/s", variants[v].name, us, gbs);
        if (difference[v] > 1e-2 && !variants[v].reference) line += " MISMATCH";
      }
      fmt::print("{}\n", line);
      rows.push_back(row);
    }
    for (void* b : bs) CUDA_OR_DIE(cudaFree(b));
    CUDA_OR_DIE(cudaFree(a));
    CUDA_OR_DIE(cudaFree(d));
    CUDA_OR_DIE(cudaFree(d0));
  }
  CUDA_OR_DIE(cudaFree(partial));
  CUDA_OR_DIE(cudaFree(counters));
  CUDA_OR_DIE(cudaFree(sink));
  if (!json_path.empty())
    std::ofstream(json_path) << nlohmann::json{{"device", props.name}, {"rows", rows}}.dump(1);
  return 0;
}
