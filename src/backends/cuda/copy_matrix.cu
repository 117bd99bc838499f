// Strided matrix copy with zero fill, used by staging: unaligned operands into
// padded buffers whose rows start on 16-byte boundaries, and the result back.
//
// Staging only pays off if these copies run near memory bandwidth, and the
// rows they touch start at arbitrary 2-byte offsets. So each thread writes one
// 16-byte-aligned vector of the destination row, and assembles it from the two
// aligned source vectors that overlap it with a funnel shift in registers:
// every global access is a 16-byte vector except at the ends of a row.
// Elements move as raw bits (zero bits are 0 in fp16, bf16 and fp32) unless an
// activation is applied on the way, which saves the staged erf-GELU a pass.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/dependent_launch.cuh"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/dtype_dispatch.cuh"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/launch_geometry.cuh"

namespace ge2::cuda {
namespace {

struct CopyParams {
  const void* src;
  void* dst;
  long long batch, src_rows, src_cols, dst_rows, dst_cols;
  long long s_bs, s_rs, s_cs, d_bs, d_rs, d_cs;
  int act;
};

template <typename T>
using Bits = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::uint32_t>;

constexpr int kThreads = 128;

// Row `row` of the destination (all batches counted) and the source row it copies.
template <typename E>
struct RowPair {
  const E* src;
  E* dst;
  bool inside;  // false past the source's rows: the destination row is zero-filled
};

template <typename E>
__device__ __forceinline__ RowPair<E> row_pair(const CopyParams& p, long long row) {
  const long long z = row / p.dst_rows, i = row - z * p.dst_rows;
  return {static_cast<const E*>(p.src) + z * p.s_bs + i * p.s_rs,
          static_cast<E*>(p.dst) + z * p.d_bs + i * p.d_rs, i < p.src_rows};
}

// The 16 bytes starting kWordShift words (+ half_word_bits) into lo:hi.
template <int kWordShift>
__device__ __forceinline__ uint4 take_16_bytes(const uint32_t (&w)[8], unsigned half_word_bits) {
  uint4 out;
  out.x = __funnelshift_r(w[kWordShift + 0], w[kWordShift + 1], half_word_bits);
  out.y = __funnelshift_r(w[kWordShift + 1], w[kWordShift + 2], half_word_bits);
  out.z = __funnelshift_r(w[kWordShift + 2], w[kWordShift + 3], half_word_bits);
  out.w = __funnelshift_r(w[kWordShift + 3], w[kWordShift + 4], half_word_bits);
  return out;
}

// Source vector q of a row (aligned, covering logical elements
// [q*C - shift, q*C - shift + C)), zero outside [0, cols) and for rows past the source.
template <typename E>
__device__ __forceinline__ uint4 load_source_vector(const E* row, long long q, int shift,
                                                    long long cols, bool inside) {
  constexpr int C = 16 / sizeof(E);
  const long long first = q * C - shift;
  if (inside && first >= 0 && first + C <= cols)
    return *reinterpret_cast<const uint4*>(row + first);
  uint4 packed = make_uint4(0, 0, 0, 0);
  if (!inside) return packed;
  E* e = reinterpret_cast<E*>(&packed);
#pragma unroll
  for (int k = 0; k < C; ++k) {
    const long long l = first + k;
    if (l >= 0 && l < cols) e[k] = row[l];
  }
  return packed;
}

// Destination rows contiguous and element-aligned, source rows contiguous and
// element-aligned: 2-D grid, y over rows, x over the destination's aligned vectors.
template <typename T>
__global__ void __launch_bounds__(kThreads) copy_rows_vectorised(CopyParams p) {
  wait_for_producer();
  using E = Bits<T>;
  constexpr int C = 16 / sizeof(E);
  const long long rows_total = p.batch * p.dst_rows;
  for (long long row = blockIdx.y; row < rows_total; row += gridDim.y) {
    const auto [src_row, dst_row, inside] = row_pair<E>(p, row);
    const int shift_s = misalignment_bytes(src_row) / static_cast<int>(sizeof(E));
    const int shift_d = misalignment_bytes(dst_row) / static_cast<int>(sizeof(E));
    // Destination vector w holds logical elements [w*C - shift_d, +C), which sit
    // in source vectors q and q+1 starting r elements into q.
    const int r = ((shift_s - shift_d) % C + C) % C;
    const int q_offset = (shift_s - shift_d - r) / C;  // exact division
    const unsigned bytes = static_cast<unsigned>(r) * sizeof(E);
    const long long vectors = (p.dst_cols + shift_d + C - 1) / C;
    for (long long w = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x; w < vectors;
         w += static_cast<long long>(gridDim.x) * kThreads) {
      const long long q = w + q_offset;
      uint32_t words[8];
      const uint4 lo = load_source_vector(src_row, q, shift_s, p.src_cols, inside);
      const uint4 hi =
          r == 0 ? lo : load_source_vector(src_row, q + 1, shift_s, p.src_cols, inside);
      words[0] = lo.x, words[1] = lo.y, words[2] = lo.z, words[3] = lo.w;
      words[4] = hi.x, words[5] = hi.y, words[6] = hi.z, words[7] = hi.w;
      const unsigned half_bits = (bytes & 3u) * 8u;
      uint4 out;
      switch (bytes / 4u) {
        case 0:
          out = take_16_bytes<0>(words, half_bits);
          break;
        case 1:
          out = take_16_bytes<1>(words, half_bits);
          break;
        case 2:
          out = take_16_bytes<2>(words, half_bits);
          break;
        default:
          out = take_16_bytes<3>(words, half_bits);
          break;
      }
      if (p.act != 0) out = act_vector<T>(out, p.act);
      const long long first = w * C - shift_d;
      if (first >= 0 && first + C <= p.dst_cols) {
        *reinterpret_cast<uint4*>(dst_row + first) = out;
      } else {
        const E* e = reinterpret_cast<const E*>(&out);
#pragma unroll
        for (int k = 0; k < C; ++k) {
          const long long l = first + k;
          if (l >= 0 && l < p.dst_cols) dst_row[l] = e[k];
        }
      }
    }
  }
}

// Any strides: one element per thread, consecutive threads on consecutive columns.
template <typename T>
__global__ void __launch_bounds__(kThreads) copy_rows_scalar(CopyParams p) {
  wait_for_producer();
  const long long rows_total = p.batch * p.dst_rows;
  for (long long row = blockIdx.y; row < rows_total; row += gridDim.y) {
    const auto [src_row, dst_row, inside] = row_pair<T>(p, row);
    for (long long j = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x; j < p.dst_cols;
         j += static_cast<long long>(gridDim.x) * kThreads)
      dst_row[j * p.d_cs] = (inside && j < p.src_cols)
                                ? from_float<T>(activate(p.act, to_float(src_row[j * p.s_cs])))
                                : from_float<T>(0.0f);
  }
}

template <typename T>
void launch_typed(const CopyParams& p, cudaStream_t stream) {
  constexpr long long C = 16 / sizeof(T);
  const bool element_aligned =
      misalignment_bytes(p.src) % sizeof(T) == 0 && misalignment_bytes(p.dst) % sizeof(T) == 0;
  if (element_aligned && p.s_cs == 1 && p.d_cs == 1) {
    GE2_CUDA_CHECK(launch_dependent(true, copy_rows_vectorised<T>,
                                    grid_2d(p.batch * p.dst_rows, (p.dst_cols + C) / C, kThreads),
                                    dim3(kThreads), 0, stream, p));
  } else {
    GE2_CUDA_CHECK(launch_dependent(true, copy_rows_scalar<T>,
                                    grid_2d(p.batch * p.dst_rows, p.dst_cols, kThreads),
                                    dim3(kThreads), 0, stream, p));
  }
}

}  // namespace

void launch_copy_matrix(DType dtype, const MatrixView& src, const void* src_data,
                        const MatrixView& dst, void* dst_data, cudaStream_t stream,
                        Activation act) {
  const CopyParams p{src_data,         dst_data,
                     dst.batch,        src.rows,
                     src.cols,         dst.rows,
                     dst.cols,         src.batch_stride,
                     src.row_stride,   src.col_stride,
                     dst.batch_stride, dst.row_stride,
                     dst.col_stride,   static_cast<int>(act)};
  with_cuda_type(dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    launch_typed<T>(p, stream);
  });
}

}  // namespace ge2::cuda
