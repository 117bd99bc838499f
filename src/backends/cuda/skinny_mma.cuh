// The tensor-core form of the cuda_skinny kernel for 16-bit data (sm_80 and
// later): D = act(alpha * A * op(B) + beta * C + bias) for up to 16 rows of A
// against a K-contiguous B (nn.Linear's [N, K] weight).
//
// The CUDA-core form (skinny_gemm.cuh) converts and multiplies every B element
// once per row of A, so its time grows with the rows; here mma.sync m16n8k16
// takes 16 rows for the price of one, and the GEMM stays a stream of B.
// A block owns kTiles * 8 columns; its warps split K in 32-element steps (64 for
// an e4m3 B: BRow) taken
// in turn (warp w: steps w, w + kWarps, ...), so together they read B's rows
// front to back, and add their partial sums in shared memory at the end. Where
// a grid of such blocks fills the chip unevenly, K is also split over blocks
// (Params::splits, skinny_k_splits), which add up through fp32 partial sums.
//
// The sum over k does not depend on the order of its terms, so each lane loads
// one 16-byte vector (8 consecutive k) of a B row and of each A row and feeds
// the two mma.sync instructions of the step from it: lane (g, t) = (lane / 4,
// lane % 4) holds B row g and A rows g and g + 8 at k = 32 s + 8 t ... + 7, the
// fragment slots mma.sync assigns to k = 2t, 2t + 1, 2t + 8, 2t + 9 of each
// instruction. A and B agree on the mapping, so no shuffle or shared-memory
// staging is needed and each B element is loaded exactly once.
// An e4m3 B (cuda_skinny_fp8w) is read 16 bytes = 16 k per lane, widened to two
// such groups of 8, with A loaded as two vectors to match.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstring>
#include <type_traits>

#include "backends/cuda/skinny_gemm.cuh"

namespace ge2::cuda::skinny {

// Warps per block (splitting K), 8-column tiles per block, steps in flight per
// warp; with kContiguous a warp's kUnroll steps in flight are consecutive (a
// run of 64 kUnroll bytes of each B row), else they are kWarps steps apart and
// the block's warps together read each row front to back.
// With kLateA, a round's A vectors are loaded beside the instructions that use
// them rather than with its B vectors (A is small and cached; its registers are
// then one step's, not kUnroll steps').
template <int kWarpsT, int kTilesT, int kUnrollT, bool kContiguousT = false, int kMinBlocksT = 1,
          bool kLateAT = false>
struct MmaConfig {
  static constexpr int kWarps = kWarpsT, kTiles = kTilesT, kUnroll = kUnrollT;
  static constexpr bool kContiguous = kContiguousT;
  static constexpr int kMinBlocks = kMinBlocksT;  // __launch_bounds__'s blocks per SM
  static constexpr bool kLateA = kLateAT;
  static constexpr int kColumnsPerBlock = 8 * kTiles;
};

// c += a * b for one m16n8k16 tile, fp32 accumulation.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                          unsigned a3, unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the selector offers cuda_skinny from compute capability 8.0 only
#else
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// How a lane reads its kLaneK consecutive k of one B row, one 16-byte vector, as
// groups of four words (pairs of T) mma.sync takes: 8 elements of T, one group as
// it is loaded.
template <typename T, typename TB>
struct BRow {
  static constexpr int kLaneK = 8, kGroups = 1;
  __device__ __forceinline__ static uint4 words(const uint4& raw, int) { return raw; }
};
// An e4m3 weight (ge2's W8A16 row): 16 bytes, widened to two groups of pairs of T.
// Every e4m3 value is exact in f16 and in bf16, so the product is the 16-bit
// GEMM's with the weight rounded to e4m3; the column's scale is applied to the sum
// (store_output). Sixteen bytes per lane keep as many bytes of B in flight as the
// 16-bit form (run 30: eight bytes streamed 1.6 TB/s where the block needs 2.5+).
template <typename T>
struct BRow<T, __nv_fp8_storage_t> {
  static constexpr int kLaneK = 16, kGroups = 2;
  __device__ __forceinline__ static unsigned pair(unsigned two_bytes) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes), __NV_E4M3);
    unsigned word;
    if constexpr (std::is_same_v<T, __half>) {
      memcpy(&word, &h, sizeof word);
    } else {
      const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(__half2(h)));
      memcpy(&word, &b, sizeof word);
    }
    return word;
  }
  __device__ __forceinline__ static uint4 words(const uint4& raw, int group) {
    const unsigned lo = group == 0 ? raw.x : raw.z, hi = group == 0 ? raw.y : raw.w;
    return {pair(lo & 0xffffu), pair(lo >> 16), pair(hi & 0xffffu), pair(hi >> 16)};
  }
};

// kRows: 8 (rows g only; the upper half of each tile multiplies zeros) or 16.
// TB: B's element, T or an e4m3 byte (Params::b_scale then holds its scales).
// kBlockScales: B's scales vary along K in blocks (Params::b_scale_block_k, the
// step's K times a power of two; b_scale_block_n a multiple of 8): each step's
// products are summed apart and added to the accumulator times their block's scale,
// so the weight is read as e4m3 * scale exactly, as with one scale per column.
template <typename T, int kRows, typename Cfg, typename TB = T, bool kBlockScales = false>
__global__ void __launch_bounds__(32 * Cfg::kWarps, Cfg::kMinBlocks) mma_kernel(Params p) {
  static_assert(sizeof(T) == 2, "mma.sync m16n8k16 takes 16-bit inputs");
  using B = BRow<T, TB>;
  // A step of K: the four lanes t of a group each take kLaneK consecutive k (one
  // 16-byte vector of B, kGroups of A per row) of the step's 4 kLaneK. The sum over
  // k does not depend on which k meets which fragment slot, as long as A and B agree.
  constexpr int kLaneK = B::kLaneK, kGroups = B::kGroups, kStepK = 4 * kLaneK;
  static_assert(kRows == 8 || kRows == 16);
  wait_for_producer();  // A is usually the output of the kernel before
  constexpr int kWarps = Cfg::kWarps, kTiles = Cfg::kTiles, kUnroll = Cfg::kUnroll;
  constexpr int kCols = Cfg::kColumnsPerBlock;
  // One more column per row: the fragment stores below hit distinct banks.
  __shared__ float partial[kWarps][kRows][kCols + 1];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const long long col0 = static_cast<long long>(blockIdx.x) * kCols;
  const long long z = blockIdx.y;
  const TB* b[kTiles];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {  // a column past N re-reads the last one; it is not written
    const long long col = col0 + 8 * i + g < p.n ? col0 + 8 * i + g : p.n - 1;
    b[i] = static_cast<const TB*>(p.b) + z * p.b_batch + col * p.ldb + kLaneK * t;
  }
  const bool has_row0 = g < p.m, has_row1 = g + 8 < p.m;
  const T* a_base = static_cast<const T*>(p.a) + z * p.a_batch + kLaneK * t;
  const T* a0 = a_base + (has_row0 ? g : 0) * p.lda;
  const T* a1 = a_base + (has_row1 ? g + 8 : 0) * p.lda;

  float acc[kTiles][4] = {};
  // kBlockScales: the N block of each tile's scales (a tile lies inside one block).
  int scale_row[kTiles];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const long long col = col0 + 8 * i < p.n ? col0 + 8 * i : p.n - 1;
    scale_row[i] = kBlockScales ? static_cast<int>(col / p.b_scale_block_n) * p.b_scale_ld : 0;
  }
  // This block's steps of kStepK along K: all of them, or its split's share.
  const int splits = gridDim.z, split = blockIdx.z;
  const int all_steps = (p.k + kStepK - 1) / kStepK,
            split_steps = (all_steps + splits - 1) / splits;
  const int first_step = split * split_steps;
  const int end_step = min(all_steps, first_step + split_steps);
  constexpr int kStepStride = Cfg::kContiguous ? 1 : kWarps;  // between a warp's steps in a round
  for (int s0 = first_step + (Cfg::kContiguous ? warp * kUnroll : warp); s0 < end_step;
       s0 += kWarps * kUnroll) {
    // Step u's A vectors (rows g and g + 8, kGroups each).
    auto load_a = [&](int u, uint4(&a)[2][kGroups]) {
      const int step = s0 + u * kStepStride, k = kStepK * step;
      // K is a multiple of 8 (16 for e4m3): a lane's vectors are all in or all out.
      const bool in_k = step < end_step && k + kLaneK * t < p.k;
#pragma unroll
      for (int h = 0; h < kGroups; ++h) {
        a[0][h] =
            in_k && has_row0 ? __ldg(reinterpret_cast<const uint4*>(a0 + k + 8 * h)) : uint4{};
        a[1][h] = kRows > 8 && in_k && has_row1
                      ? __ldg(reinterpret_cast<const uint4*>(a1 + k + 8 * h))
                      : uint4{};
      }
    };
    // Every B load of the round first, so they are in flight together (and A's with
    // them unless kLateA).
    uint4 bv[kUnroll][kTiles], av[Cfg::kLateA ? 1 : kUnroll][2][kGroups];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int step = s0 + u * kStepStride, k = kStepK * step;
      const bool in_k = step < end_step && k + kLaneK * t < p.k;
#pragma unroll
      for (int i = 0; i < kTiles; ++i)  // read once: streamed past L1
        bv[u][i] = in_k ? __ldcs(reinterpret_cast<const uint4*>(b[i] + k)) : uint4{};
      if constexpr (!Cfg::kLateA) load_a(u, av[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if constexpr (Cfg::kLateA) load_a(u, av[0]);
      const auto& a = av[Cfg::kLateA ? 0 : u];
      // kBlockScales: the step's scale per tile, loaded before its products are
      // summed (zero past the end, where they are sums of zeros and the scale may not
      // exist), and those sums kept apart.
      float scale[kBlockScales ? kTiles : 1];
      if constexpr (kBlockScales) {
        const int step = s0 + u * kStepStride;
#pragma unroll
        for (int i = 0; i < kTiles; ++i)
          scale[i] = step < end_step
                         ? __ldg(p.b_scale + scale_row[i] + (step >> p.b_scale_step_shift))
                         : 0.0f;
      }
      float step_sum[kBlockScales ? kTiles : 1][4] = {};
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        float(&sum)[4] = kBlockScales ? step_sum[kBlockScales ? i : 0] : acc[i];
#pragma unroll
        for (int h = 0; h < kGroups; ++h) {
          const uint4 bw = B::words(bv[u][i], h);
          mma_16816<T>(sum, a[0][h].x, a[1][h].x, a[0][h].y, a[1][h].y, bw.x, bw.y);
          mma_16816<T>(sum, a[0][h].z, a[1][h].z, a[0][h].w, a[1][h].w, bw.z, bw.w);
        }
      }
      if constexpr (kBlockScales) {
#pragma unroll
        for (int i = 0; i < kTiles; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(scale[i], step_sum[i][j], acc[i][j]);
      }
    }
  }

  // Accumulator fragment: (row g, columns 2t and 2t + 1) and the same for row g + 8.
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    partial[warp][g][8 * i + 2 * t] = acc[i][0];
    partial[warp][g][8 * i + 2 * t + 1] = acc[i][1];
    if constexpr (kRows > 8) {
      partial[warp][g + 8][8 * i + 2 * t] = acc[i][2];
      partial[warp][g + 8][8 * i + 2 * t + 1] = acc[i][3];
    }
  }
  __syncthreads();
  // f(r, c, col) for each of the block's outputs inside D: row r, its column c, D's column col.
  auto for_each_output = [&](auto&& f) {
    for (int e = threadIdx.x; e < kRows * kCols; e += 32 * kWarps) {
      const int r = e / kCols, c = e % kCols;
      const long long col = col0 + c;
      if (r < p.m && col < p.n) f(r, c, col);
    }
  };
  // Where split s keeps its sum for D[r, col].
  auto split_sum = [&](int s, int r, long long col) {
    return p.partial + ((z * splits + s) * p.m + r) * p.n + col;
  };
  for_each_output([&](int r, int c, long long col) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += partial[w][r][c];
    if (splits == 1)
      store_output<T>(p, z, r, col, sum);
    else
      *split_sum(split, r, col) = sum;
  });
  if (splits == 1) return;

  // Split K: the last block of this column tile to finish sums the splits.
  __shared__ bool last;
  __threadfence();  // this block's partial sums are visible before it is counted
  __syncthreads();
  unsigned* counter = p.counters + z * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  for_each_output([&](int r, int, long long col) {
    float sum = 0.f;
    for (int s = 0; s < splits; ++s)
      sum += __ldcg(split_sum(s, r, col));  // L2: other SMs wrote them
    store_output<T>(p, z, r, col, sum);
  });
}

// Launches the instance for p.m rows (at most 16) on `stream`, programmatically
// dependent on the kernel before (dependent_launch.cuh); the launch's error.
template <typename T, typename Cfg, typename TB = T, bool kBlockScales = false>
[[nodiscard]] cudaError_t launch_mma(const Params& p, int batch, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.n + Cfg::kColumnsPerBlock - 1) / Cfg::kColumnsPerBlock),
                  static_cast<unsigned>(batch), static_cast<unsigned>(p.splits > 1 ? p.splits : 1));
  const dim3 threads(32 * Cfg::kWarps);
  return launch_dependent(
      true,
      p.m <= 8 ? mma_kernel<T, 8, Cfg, TB, kBlockScales> : mma_kernel<T, 16, Cfg, TB, kBlockScales>,
      grid, threads, 0, stream, p);
}

}  // namespace ge2::cuda::skinny
