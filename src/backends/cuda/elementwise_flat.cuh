// The flat form of the elementwise pass, out = act(combine(x_act(x), y) + bias)
// over dense tensors seen as one run of 16-byte vectors: the erf-GELU pass after
// a cuBLASLt GEMM takes it, and an add or multiply whose y is laid out like x.
// Its geometry is a template parameter so that bench/elementwise_probe.cu can
// time configurations of the very kernel the library runs (elementwise.cu
// instantiates one). Run 22 also timed grids capped at 2-8 blocks per SM, with
// and without the next round loaded early: slower from 2048 rows, no better
// below (bench/results/2026-12-06-h100-run22), so there is no such option.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/dependent_launch.cuh"
#include "backends/cuda/device_math.cuh"

namespace ge2::cuda::flat {

struct Params {
  const void* x;
  const void* y;  // laid out like x, read with a combining op only
  const void* bias;
  void* out;
  long long vectors;          // 16-byte vectors in x, y and out
  long long vectors_per_row;  // the bias repeats every row
  bool has_bias;
};

// Threads per block and vectors each thread has in flight per round; the grid
// has as many blocks as the tensor needs.
template <int kThreadsT, int kUnrollT>
struct Config {
  static constexpr int kThreads = kThreadsT, kUnroll = kUnrollT;
};

template <typename Cfg>
__device__ __forceinline__ void load_round(const Params& p, long long first,
                                           uint4 (&in)[Cfg::kUnroll], uint4 (&other)[Cfg::kUnroll],
                                           bool reads_y) {
  const uint4* x = static_cast<const uint4*>(p.x);
  const uint4* y = static_cast<const uint4*>(p.y);
#pragma unroll
  for (int u = 0; u < Cfg::kUnroll; ++u) {
    const long long v = first + static_cast<long long>(u) * Cfg::kThreads;
    if (v < p.vectors) {
      in[u] = x[v];
      other[u] = reads_y ? y[v] : uint4{};
    }
  }
}

template <typename T, typename Cfg, typename Op>
__device__ __forceinline__ void store_round(const Params& p, const Op& op, long long first,
                                            const uint4 (&in)[Cfg::kUnroll],
                                            const uint4 (&other)[Cfg::kUnroll]) {
  const uint4* bias = static_cast<const uint4*>(p.bias);
  uint4* out = static_cast<uint4*>(p.out);
#pragma unroll
  for (int u = 0; u < Cfg::kUnroll; ++u) {
    const long long v = first + static_cast<long long>(u) * Cfg::kThreads;
    if (v >= p.vectors) continue;
    const uint4 bias_packed = p.has_bias ? bias[v % p.vectors_per_row] : uint4{};
    out[v] = apply_vector<T>(op, in[u], other[u], p.has_bias, bias_packed);
  }
}

// Rounds of kThreads * kUnroll vectors per block, striding over the grid.
template <typename T, typename Cfg, typename Op>
__global__ void __launch_bounds__(Cfg::kThreads) kernel(Params p, Op op) {
  wait_for_producer();  // x is usually the D of the GEMM just before
  constexpr long long kPerBlock = static_cast<long long>(Cfg::kThreads) * Cfg::kUnroll;
  const long long step = static_cast<long long>(gridDim.x) * kPerBlock;
  long long first = static_cast<long long>(blockIdx.x) * kPerBlock + threadIdx.x;
  for (; first < p.vectors; first += step) {
    uint4 in[Cfg::kUnroll], other[Cfg::kUnroll];
    load_round<Cfg>(p, first, in, other, op.reads_y());
    store_round<T, Cfg>(p, op, first, in, other);
  }
}

// Launches the pass on `stream`, programmatically dependent on the kernel before
// it when `dependent` (dependent_launch.cuh); the launch's error.
template <typename T, typename Cfg, typename Op>
cudaError_t launch(const Params& p, const Op& op, cudaStream_t stream, bool dependent) {
  constexpr long long kPerBlock = static_cast<long long>(Cfg::kThreads) * Cfg::kUnroll;
  const long long blocks =
      std::clamp<long long>((p.vectors + kPerBlock - 1) / kPerBlock, 1, 1LL << 30);
  return launch_dependent(dependent, kernel<T, Cfg, Op>, dim3(static_cast<unsigned>(blocks)),
                          dim3(Cfg::kThreads), 0, stream, p, op);
}

}  // namespace ge2::cuda::flat
