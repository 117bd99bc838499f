// The kernel of the e4m3 quantization per row and group of k (fp8_quantize.cu
// launches it): lt_fp8_e4m3 on a weight given with 128 x 128 block scales reads A
// with one scale per row and kFp8ScaleBlock columns (cuBLASLt's VEC128_32F mode).
// Each group's amax, scale and conversion are the row-wise kernels' arithmetic
// (fp8_quantize_rows.cuh: a NaN makes its group's scale NaN, an all-zero group
// uses 1), over 128 elements instead of a row.
#pragma once

#include "backends/cuda/fp8_quantize_rows.cuh"
#include "select/kernel_id.hpp"

namespace ge2::cuda::quantize {

// A half-warp per group: 16 threads x 8 elements = kFp8ScaleBlock.
constexpr int kGroupThreads = 256, kGroupLanes = 16;
static_assert(kGroupLanes * kVector == kFp8ScaleBlock, "one 16-byte word per lane and group");

// dst, dense row-major, gets each element of `src` through its group's scale;
// scales[(col / kFp8ScaleBlock) * scale_ld + row] the group's dequantization scale.
// kVectorized: 16-byte aligned rows of whole words (cols % 8 == 0); else one element
// at a time through the view's strides.
template <typename T, bool kVectorized, typename Act>
__global__ void __launch_bounds__(kGroupThreads)
    groups_kernel(const T* __restrict__ src, View v, __nv_fp8_storage_t* __restrict__ dst,
                  float* __restrict__ scales, long long scale_ld, Act act) {
  wait_for_producer();
  const long long groups_per_row = (v.cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const long long groups = v.rows * groups_per_row;
  const int lane = static_cast<int>(threadIdx.x) % kGroupLanes;
  // The two half-warps of a warp may run different trip counts: each reduces alone.
  const unsigned half_mask = 0xffffu << (threadIdx.x & 16u);
  const long long per_grid = static_cast<long long>(gridDim.x) * (kGroupThreads / kGroupLanes);
  for (long long g =
           (static_cast<long long>(blockIdx.x) * kGroupThreads + threadIdx.x) / kGroupLanes;
       g < groups; g += per_grid) {
    const long long row = g / groups_per_row, group = g % groups_per_row;
    const long long col = group * kFp8ScaleBlock + static_cast<long long>(lane) * kVector;
    const T* src_row = src + row * v.row_stride;
    float values[kVector] = {};
    int count = 0;
    if constexpr (kVectorized) {
      if (col < v.cols) count = load_group<T, true>(src_row, v, col, act, values);
    } else {
      for (; count < kVector && col + count < v.cols; ++count)
        values[count] = activated(act, src_row[(col + count) * v.col_stride]);
    }
    unsigned local = amax_bits(0u, values, count);
    for (int offset = kGroupLanes / 2; offset > 0; offset /= 2)
      local = max(local, __shfl_xor_sync(half_mask, local, offset));
    const float amax = __uint_as_float(local);
    if (lane == 0) scales[group * scale_ld + row] = e4m3_scale(amax);
    const float multiplier = e4m3_multiplier(amax);
    __nv_fp8_storage_t* out = dst + row * v.cols + col;
    if constexpr (kVectorized) {
      if (count == kVector) *reinterpret_cast<std::uint64_t*>(out) = pack_e4m3(values, multiplier);
    } else {
      for (int i = 0; i < count; ++i)
        out[i] = __nv_cvt_float_to_fp8(values[i] * multiplier, __NV_SATFINITE, __NV_E4M3);
    }
  }
}

}  // namespace ge2::cuda::quantize
