// cuda_f32: a 64x64x16 shared-memory tiled GEMM, 256 threads each computing a
// 4x4 block in fp32 registers. Operands are read through their strides, so any
// layout, alignment and dtype works; the epilogue applies C, bias and activation.
#include <algorithm>

#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/dependent_launch.cuh"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/dtype_dispatch.cuh"
#include "backends/cuda/kernels.hpp"
#include "core/error.hpp"

namespace ge2::cuda {
namespace {

constexpr int BM = kFallbackTileM, BN = kFallbackTileN, BK = kFallbackTileK, kThreads = 256;

struct FallbackParams {
  const void* a;
  const void* b;
  const void* c;
  const void* bias;
  void* d;
  long long m, n, k, batch;
  // op(A)(i, k) at a_batch*z + i*a_rs + k*a_ks; op(B)(k, j) at b_batch*z + k*b_ks + j*b_js.
  long long a_batch, a_rs, a_ks;
  long long b_batch, b_ks, b_js;
  long long c_batch, c_rs, c_cs;
  long long d_batch, d_rs, d_cs;
  long long bias_stride;
  float alpha, beta;
  int act;
  int has_c, has_bias;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) fallback_gemm_kernel(FallbackParams p) {
  wait_for_producer();
  // k-major tiles so the inner product reads rows of both with broadcast-friendly patterns.
  __shared__ float a_tile[BK][BM + 4];
  __shared__ float b_tile[BK][BN + 4];
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long row0 = static_cast<long long>(blockIdx.y) * BM;
  const long long col0 = static_cast<long long>(blockIdx.x) * BN;

  for (long long z = blockIdx.z; z < p.batch; z += gridDim.z) {
    float acc[4][4] = {};
    for (long long k0 = 0; k0 < p.k; k0 += BK) {
#pragma unroll
      for (int i = 0; i < (BM * BK) / kThreads; ++i) {
        const int idx = threadIdx.x + i * kThreads;
        const int r = idx / BK, kk = idx % BK;
        const long long gr = row0 + r, gk = k0 + kk;
        a_tile[kk][r] =
            (gr < p.m && gk < p.k) ? to_float(a[z * p.a_batch + gr * p.a_rs + gk * p.a_ks]) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < (BN * BK) / kThreads; ++i) {
        const int idx = threadIdx.x + i * kThreads;
        const int kk = idx / BN, cidx = idx % BN;
        const long long gk = k0 + kk, gc = col0 + cidx;
        b_tile[kk][cidx] =
            (gk < p.k && gc < p.n) ? to_float(b[z * p.b_batch + gk * p.b_ks + gc * p.b_js]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = a_tile[kk][ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = b_tile[kk][tx * 4 + j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
    const T* c = static_cast<const T*>(p.c);
    const T* bias = static_cast<const T*>(p.bias);
    T* d = static_cast<T*>(p.d);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long gr = row0 + ty * 4 + i;
      if (gr >= p.m) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const long long gc = col0 + tx * 4 + j;
        if (gc >= p.n) continue;
        float v = p.alpha * acc[i][j];
        if (p.has_c) v += p.beta * to_float(c[z * p.c_batch + gr * p.c_rs + gc * p.c_cs]);
        if (p.has_bias) v += to_float(bias[gc * p.bias_stride]);
        d[z * p.d_batch + gr * p.d_rs + gc * p.d_cs] = from_float<T>(activate(p.act, v));
      }
    }
  }
}

}  // namespace

void launch_fallback_gemm(const GemmProblem& pr, const void* a, const void* b, const void* c,
                          const void* bias, void* d, cudaStream_t stream) {
  FallbackParams p{};
  p.a = a;
  p.b = b;
  p.c = c;
  p.bias = bias;
  p.d = d;
  p.m = pr.m;
  p.n = pr.n;
  p.k = pr.k;
  p.batch = pr.batch;
  const MatrixView op_a = pr.op_a(), op_b = pr.op_b();
  p.a_batch = op_a.batch_stride;
  p.a_rs = op_a.row_stride;
  p.a_ks = op_a.col_stride;
  p.b_batch = op_b.batch_stride;
  p.b_ks = op_b.row_stride;
  p.b_js = op_b.col_stride;
  p.c_batch = pr.c.batch_stride;
  p.c_rs = pr.c.row_stride;
  p.c_cs = pr.c.col_stride;
  p.d_batch = pr.d.batch_stride;
  p.d_rs = pr.d.row_stride;
  p.d_cs = pr.d.col_stride;
  p.bias_stride = pr.bias_stride;
  p.alpha = pr.alpha;
  p.beta = pr.beta;
  p.act = static_cast<int>(pr.act);
  p.has_c = pr.has_c;
  p.has_bias = pr.has_bias;
  const dim3 grid(static_cast<unsigned>((pr.n + BN - 1) / BN),
                  static_cast<unsigned>((pr.m + BM - 1) / BM),
                  static_cast<unsigned>(std::min<long long>(pr.batch, 65535)));
  require(grid.y <= 65535u, GE2_ERROR_UNSUPPORTED,
          "cuda_f32: M = {} needs {} row tiles, more than the grid allows (65535)", pr.m, grid.y);
  with_cuda_type(pr.dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    GE2_CUDA_CHECK(
        launch_dependent(true, fallback_gemm_kernel<T>, grid, dim3(kThreads), 0, stream, p));
  });
}

}  // namespace ge2::cuda
