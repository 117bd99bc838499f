// cuda_skinny: D = act(alpha * A * op(B) + beta * C + bias) for a few rows of A
// (decode-sized M <= kSkinnyMaxRows) against a K-contiguous B (nn.Linear's
// [N, K] weight). Such a GEMM streams B once and does little else, so each warp
// owns output columns: its lanes read 16-byte vectors of one B row (four in
// flight per lane) and of the A rows, accumulate in fp32 and reduce with warp
// shuffles; the epilogue is fused. One launch, no workspace, no library call:
// its host cost is a kernel launch.
#include <algorithm>

#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/dtype_dispatch.cuh"
#include "backends/cuda/kernels.hpp"
#include "core/error.hpp"

namespace ge2::cuda {
namespace {

constexpr int kWarps = kSkinnyColumnsPerBlock, kThreads = 32 * kWarps, kUnroll = 4;

struct SkinnyParams {
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

template <typename T, int kRows>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(SkinnyParams p) {
  using V = Vector<T>;
  constexpr int kStep = 32 * V::kElements;  // K elements a warp reads per vector load
  const int lane = threadIdx.x % 32;
  const long long col = static_cast<long long>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const long long z = blockIdx.y;
  if (col >= p.n) return;
  const T* b = static_cast<const T*>(p.b) + z * p.b_batch + col * p.ldb;
  const T* a = static_cast<const T*>(p.a) + z * p.a_batch;

  float acc[kRows] = {};
  for (int k0 = lane * V::kElements; k0 < p.k; k0 += kStep * kUnroll) {
    // All of this lane's B vectors of the step first: the loads are in flight together.
    uint4 bv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = k0 + u * kStep;
      if (k < p.k) bv[u] = __ldcs(reinterpret_cast<const uint4*>(b + k));  // read once: stream
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = k0 + u * kStep;
      if (k >= p.k) break;
      float bf[V::kElements];
      V::unpack(bv[u], bf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= p.m) break;
        float af[V::kElements];
        V::unpack(__ldg(reinterpret_cast<const uint4*>(a + r * p.lda + k)), af);
#pragma unroll
        for (int e = 0; e < V::kElements; ++e) acc[r] = fmaf(af[e], bf[e], acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);

  // Lane r writes row r (a register array indexed by a constant: no local memory).
  const T* c = static_cast<const T*>(p.c) + z * p.c_batch;
  T* d = static_cast<T*>(p.d) + z * p.d_batch;
  const float bias =
      p.has_bias ? to_float(static_cast<const T*>(p.bias)[col * p.bias_stride]) : 0.f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (lane != r || r >= p.m) continue;
    float v = p.alpha * acc[r];
    if (p.has_c) v += p.beta * to_float(c[r * p.ldc + col]);
    d[r * p.ldd + col] = from_float<T>(activate(p.act, v + bias));
  }
}

template <typename T>
void launch_rows(int rows, const SkinnyParams& p, dim3 grid, cudaStream_t stream) {
  if (rows <= 1) {
    skinny_gemm_kernel<T, 1><<<grid, kThreads, 0, stream>>>(p);
  } else if (rows <= 2) {
    skinny_gemm_kernel<T, 2><<<grid, kThreads, 0, stream>>>(p);
  } else if (rows <= 4) {
    skinny_gemm_kernel<T, 4><<<grid, kThreads, 0, stream>>>(p);
  } else {
    skinny_gemm_kernel<T, kSkinnyMaxRows><<<grid, kThreads, 0, stream>>>(p);
  }
}

}  // namespace

void launch_skinny_gemm(const GemmProblem& pr, const void* a, const void* b, const void* c,
                        const void* bias, void* d, cudaStream_t stream) {
  // The selector admitted the problem (skinny_layout_problem); these restate its invariants.
  const MatrixView op_a = pr.op_a(), op_b = pr.op_b();
  require(pr.m >= 1 && pr.m <= kSkinnyMaxRows && op_a.col_stride == 1 && op_b.row_stride == 1 &&
              pr.d.col_stride == 1 && (!pr.has_c || pr.c.col_stride == 1) && pr.batch <= 65535,
          GE2_ERROR_INTERNAL, "cuda_skinny: GEMM {} is outside the kernel's layouts",
          pr.shape_string());
  SkinnyParams p{};
  p.a = a;
  p.b = b;
  p.c = c;
  p.bias = bias;
  p.d = d;
  p.m = static_cast<int>(pr.m);
  p.n = static_cast<int>(pr.n);
  p.k = static_cast<int>(pr.k);
  p.lda = op_a.row_stride;
  p.ldb = op_b.col_stride;
  p.ldc = pr.has_c ? pr.c.row_stride : 0;
  p.ldd = pr.d.row_stride;
  p.a_batch = op_a.batch_stride;
  p.b_batch = op_b.batch_stride;
  p.c_batch = pr.has_c ? pr.c.batch_stride : 0;
  p.d_batch = pr.d.batch_stride;
  p.bias_stride = pr.bias_stride;
  p.alpha = pr.alpha;
  p.beta = pr.beta;
  p.act = static_cast<int>(pr.act);
  p.has_c = pr.has_c;
  p.has_bias = pr.has_bias;
  const dim3 grid(static_cast<unsigned>((pr.n + kWarps - 1) / kWarps),
                  static_cast<unsigned>(pr.batch));
  with_cuda_type(pr.dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    launch_rows<T>(p.m, p, grid, stream);
  });
  GE2_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ge2::cuda
