// The cuda_skinny kernel template: D = act(alpha * A * op(B) + beta * C + bias)
// for a few rows of A against a K-contiguous B (nn.Linear's [N, K] weight).
// Such a GEMM streams B once and does little else, so each warp owns kCols
// output columns: its lanes read 16-byte vectors of those B rows (kUnroll per
// row in flight) and of the A rows (each A vector serves the kCols columns),
// accumulate in fp32 and reduce with warp shuffles; the epilogue is fused.
// skinny_gemm.cu instantiates the library's configuration;
// bench/skinny_probe.cu compares others on the same tensors.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/dependent_launch.cuh"
#include "backends/cuda/device_math.cuh"

namespace ge2::cuda::skinny {

struct Params {
  const void* a;
  const void* b;
  const void* c;
  const void* bias;
  void* d;
  int m, n, k;
  long long lda, ldb, ldc, ldd;                  // row strides, elements
  long long a_batch, b_batch, c_batch, d_batch;  // batch strides, elements
  long long bias_stride;
  float alpha, beta;
  int act, has_c, has_bias;
  // The e4m3 weight's dequantization scale per output column (B stored as e4m3,
  // tensor-core form only), or nullptr for a 16-bit B. With b_scale_block_k > 0,
  // one per block instead: B[col, k] (op(B)^T) takes b_scale[(col / b_scale_block_n)
  // * b_scale_ld + k / b_scale_block_k], applied to each step's sum; a step s of
  // kSkinnyFp8StepK k lies in K block s >> b_scale_step_shift.
  const float* b_scale;
  int b_scale_block_n, b_scale_block_k, b_scale_ld, b_scale_step_shift;
  // The tensor-core form's split of K over blocks (grid z): with splits > 1 each
  // block writes its share to partial[((z * splits + split) * m + r) * n + col]
  // (fp32) and the last block of a column tile, counted in counters[z * tiles +
  // tile] (zeroed before the launch), sums the splits in order and stores D, so
  // the result does not depend on which block ends last.
  int splits;
  float* partial;
  unsigned* counters;
};

// Warps per block, columns per warp, B vectors per column in flight.
template <int kWarpsT, int kColsT, int kUnrollT>
struct Config {
  static constexpr int kWarps = kWarpsT, kCols = kColsT, kUnroll = kUnrollT;
  static constexpr int kColumnsPerBlock = kWarps * kCols;
};

// Eight fp32 values (four for fp32 data) from one 16-byte vector.
template <typename T>
struct Vector {
  static constexpr int kElements = 16 / sizeof(T);
  __device__ __forceinline__ static void unpack(const uint4& v, float* out) {
    if constexpr (sizeof(T) == 4) {
      out[0] = __uint_as_float(v.x);
      out[1] = __uint_as_float(v.y);
      out[2] = __uint_as_float(v.z);
      out[3] = __uint_as_float(v.w);
    } else {
      const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        T pair[2];
        memcpy(pair, &words[i], sizeof pair);
        out[2 * i] = to_float(pair[0]);
        out[2 * i + 1] = to_float(pair[1]);
      }
    }
  }
};

// D[r, col] of batch z from its accumulated sum: alpha, beta * C, bias, activation.
template <typename T>
__device__ __forceinline__ void store_output(const Params& p, long long z, int r, long long col,
                                             float acc) {
  if (p.b_scale != nullptr && p.b_scale_block_k == 0) acc *= p.b_scale[col];
  float v = p.alpha * acc;
  if (p.has_c) v += p.beta * to_float(static_cast<const T*>(p.c)[z * p.c_batch + r * p.ldc + col]);
  if (p.has_bias) v += to_float(static_cast<const T*>(p.bias)[col * p.bias_stride]);
  static_cast<T*>(p.d)[z * p.d_batch + r * p.ldd + col] = from_float<T>(activate(p.act, v));
}

template <typename T, int kRows, typename Cfg>
__global__ void __launch_bounds__(32 * Cfg::kWarps) kernel(Params p) {
  wait_for_producer();  // A is usually the output of the kernel before
  using V = Vector<T>;
  constexpr int kStep = 32 * V::kElements;  // K elements a warp reads per vector load
  constexpr int kCols = Cfg::kCols, kUnroll = Cfg::kUnroll;
  const int lane = threadIdx.x % 32;
  const long long col0 =
      (static_cast<long long>(blockIdx.x) * Cfg::kWarps + threadIdx.x / 32) * kCols;
  const long long z = blockIdx.y;
  if (col0 >= p.n) return;
  const T* b[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c)  // a column past N re-reads the last one; it is not written
    b[c] =
        static_cast<const T*>(p.b) + z * p.b_batch + (col0 + c < p.n ? col0 + c : p.n - 1) * p.ldb;
  const T* a = static_cast<const T*>(p.a) + z * p.a_batch;

  float acc[kCols][kRows] = {};
  for (int k0 = lane * V::kElements; k0 < p.k; k0 += kStep * kUnroll) {
    // Every B vector of the step first: the loads are in flight together.
    uint4 bv[kUnroll][kCols];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        if (k0 + u * kStep < p.k)  // read once: streamed past L1
          bv[u][c] = __ldcs(reinterpret_cast<const uint4*>(b[c] + k0 + u * kStep));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = k0 + u * kStep;
      if (k >= p.k) break;
      float bf[kCols][V::kElements];
#pragma unroll
      for (int c = 0; c < kCols; ++c) V::unpack(bv[u][c], bf[c]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= p.m) break;
        float af[V::kElements];
        V::unpack(__ldg(reinterpret_cast<const uint4*>(a + r * p.lda + k)), af);
#pragma unroll
        for (int c = 0; c < kCols; ++c)
#pragma unroll
          for (int e = 0; e < V::kElements; ++e) acc[c][r] = fmaf(af[e], bf[c][e], acc[c][r]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        acc[c][r] += __shfl_xor_sync(0xffffffffu, acc[c][r], offset);

        // Lane r writes row r (registers indexed by constants: no local memory).
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const long long col = col0 + c;
    if (col >= p.n) break;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (lane == r && r < p.m) store_output<T>(p, z, r, col, acc[c][r]);
  }
}

// Launches the instance for p.m rows (1, 2, 4 or kMaxRows) on `stream`,
// programmatically dependent on the kernel before (dependent_launch.cuh); the
// launch's error.
template <typename T, typename Cfg, int kMaxRows>
[[nodiscard]] cudaError_t launch(const Params& p, int batch, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.n + Cfg::kColumnsPerBlock - 1) / Cfg::kColumnsPerBlock),
                  static_cast<unsigned>(batch));
  const dim3 threads(32 * Cfg::kWarps);
  auto* instance = p.m <= 1   ? kernel<T, 1, Cfg>
                   : p.m <= 2 ? kernel<T, 2, Cfg>
                   : p.m <= 4 ? kernel<T, 4, Cfg>
                              : kernel<T, kMaxRows, Cfg>;
  return launch_dependent(true, instance, grid, threads, 0, stream, p);
}

}  // namespace ge2::cuda::skinny
