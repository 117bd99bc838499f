// The kernels of the row-wise e4m3 quantization (fp8_quantize.cu launches them;
// bench/quantize_probe.cu times other geometries of the register form against
// the library's). A row's amax = max |x| is compared as float bits, so a NaN,
// whose bits exceed infinity's, wins and makes that row's scale NaN; each
// element becomes e4m3(x * 448 / amax) by the device's saturating
// round-to-nearest-even conversion, stored in a dense row-major copy, and the
// row's dequantization scale amax / 448 is stored beside it. A deferred
// activation (GemmProblem::a_act) is applied to each element as it is loaded
// and rounded to the 16-bit dtype: the values the producing GEMM's pass would
// have stored.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/dependent_launch.cuh"
#include "backends/cuda/device_math.cuh"
#include "core/dtype.hpp"

namespace ge2::cuda::quantize {

constexpr int kVector = 8;  // 16-bit elements per 16-byte load

struct View {
  long long rows, cols, row_stride, col_stride;
};

// act(x) as the 16-bit value a GEMM's epilogue would have stored.
template <typename T, typename Act>
__device__ __forceinline__ float activated(const Act& act, T x) {
  if constexpr (std::is_same_v<Act, Identity>) {
    return to_float(x);
  } else {
    return to_float(from_float<T>(act(to_float(x))));
  }
}

// The 8 consecutive elements of one 16-byte word as floats, `act` applied.
template <typename T, typename Act>
__device__ __forceinline__ void unpack(const uint4& raw, const Act& act, float (&values)[kVector]) {
  const T* elements = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVector; ++i) values[i] = activated(act, elements[i]);
}

// Elements [col, col + count) of one row as floats, `act` applied: a 16-byte load
// of 8 consecutive elements where the view allows it, else one strided element.
template <typename T, bool kVectorized, typename Act>
__device__ __forceinline__ int load_group(const T* row, const View& v, long long col,
                                          const Act& act, float (&values)[kVector]) {
  if constexpr (kVectorized) {
    unpack<T>(*reinterpret_cast<const uint4*>(row + col), act, values);
    return kVector;
  } else {
    values[0] = activated(act, row[col * v.col_stride]);
    return 1;
  }
}

// The activation of the row kernel, read from its parameters (rows too long for
// registers, strided views: no template instance per activation).
struct RuntimeActivation {
  int act;
  __device__ __forceinline__ float operator()(float x) const { return activate(act, x); }
};

__device__ __forceinline__ unsigned amax_bits(unsigned local, const float (&values)[kVector],
                                              int count = kVector) {
#pragma unroll
  for (int i = 0; i < kVector; ++i)
    if (i < count) local = max(local, __float_as_uint(fabsf(values[i])));
  return local;
}

// The e4m3 bytes of 8 consecutive values: one 8-byte store of the dense copy.
__device__ __forceinline__ std::uint64_t pack_e4m3(const float (&values)[kVector],
                                                   float multiplier) {
  std::uint64_t packed = 0;
#pragma unroll
  for (int i = 0; i < kVector; ++i)
    packed |= static_cast<std::uint64_t>(
                  __nv_cvt_float_to_fp8(values[i] * multiplier, __NV_SATFINITE, __NV_E4M3))
              << (8 * i);
  return packed;
}

// The block's amax of `local` (every thread's), as float bits.
template <int kThreads>
__device__ __forceinline__ unsigned block_amax(unsigned local,
                                               unsigned (&warp_amax)[kThreads / 32]) {
  for (int offset = 16; offset > 0; offset /= 2)
    local = max(local, __shfl_xor_sync(0xffffffffu, local, offset));
  if ((threadIdx.x & 31) == 0) warp_amax[threadIdx.x / 32] = local;
  __syncthreads();
  unsigned amax_bits = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) amax_bits = max(amax_bits, warp_amax[w]);
  __syncthreads();  // warp_amax is written again for the next row
  return amax_bits;
}

// The register form's geometry: kThreads per block, one row per block at a time,
// kGroups 16-byte words per thread (rows up to kMaxCols elements, 16-byte
// aligned), kept between the amax and the conversion as floats or, with kRaw, as
// the loaded words (half the registers, unpacked twice).
template <int kThreadsT, int kGroupsT, bool kRawT>
struct ShortRows {
  static constexpr int kThreads = kThreadsT, kGroups = kGroupsT;
  static constexpr bool kRaw = kRawT;
  static constexpr long long kMaxCols = static_cast<long long>(kThreads) * kVector * kGroups;
};

// The geometry the library runs (fp8_quantize.cu), per activation. Run 30 (H100,
// bench/quantize_probe, 2048 x 11008 f16): a plain operand is read fastest kept as
// the loaded words (256 x 8: 2.7 TB/s against 1.8 as floats; half the registers,
// more rows in flight); with an activation, which the raw form would evaluate
// twice, kept as floats over 512 threads x 4 words (1.7 TB/s against 1.6).
template <typename Act>
using LibraryShortRows = std::conditional_t<std::is_same_v<Act, Identity>, ShortRows<256, 8, true>,
                                            ShortRows<512, 4, false>>;
constexpr long long kLibraryShortRowsMaxCols = 16384;
static_assert(LibraryShortRows<Identity>::kMaxCols == kLibraryShortRowsMaxCols &&
                  LibraryShortRows<GeluErf>::kMaxCols == kLibraryShortRowsMaxCols,
              "the launcher decides the register form before it knows the activation's type");

// Rows of at most Cfg::kMaxCols elements: each thread keeps its groups in
// registers between the amax and the conversion, so a row is read once and all
// its loads are in flight together.
template <typename T, typename Cfg, typename Act>
__global__ void __launch_bounds__(Cfg::kThreads)
    short_rows_kernel(const T* __restrict__ src, View v, __nv_fp8_storage_t* __restrict__ dst,
                      float* __restrict__ scales, Act act) {
  wait_for_producer();
  __shared__ unsigned warp_amax[Cfg::kThreads / 32];
  for (long long r = blockIdx.x; r < v.rows; r += gridDim.x) {
    const T* row = src + r * v.row_stride;
    auto col_of = [](int g) {
      return (static_cast<long long>(g) * Cfg::kThreads + threadIdx.x) * kVector;
    };
    using Kept = std::conditional_t<Cfg::kRaw, uint4, float[kVector]>;
    Kept kept[Cfg::kGroups];
    unsigned local = 0;
#pragma unroll
    for (int g = 0; g < Cfg::kGroups; ++g) {
      if (col_of(g) >= v.cols) continue;
      if constexpr (Cfg::kRaw) {
        kept[g] = *reinterpret_cast<const uint4*>(row + col_of(g));
      } else {
        load_group<T, true>(row, v, col_of(g), act, kept[g]);
        local = amax_bits(local, kept[g]);
      }
    }
    if constexpr (Cfg::kRaw) {
#pragma unroll
      for (int g = 0; g < Cfg::kGroups; ++g) {
        if (col_of(g) >= v.cols) continue;
        float values[kVector];
        unpack<T>(kept[g], act, values);
        local = amax_bits(local, values);
      }
    }
    const float amax = __uint_as_float(block_amax<Cfg::kThreads>(local, warp_amax));
    const float multiplier = e4m3_multiplier(amax);
    if (threadIdx.x == 0) scales[r] = e4m3_scale(amax);
    __nv_fp8_storage_t* out = dst + r * v.cols;
#pragma unroll
    for (int g = 0; g < Cfg::kGroups; ++g) {
      if (col_of(g) >= v.cols) continue;
      if constexpr (Cfg::kRaw) {
        float values[kVector];
        unpack<T>(kept[g], act, values);
        *reinterpret_cast<std::uint64_t*>(out + col_of(g)) = pack_e4m3(values, multiplier);
      } else {
        *reinterpret_cast<std::uint64_t*>(out + col_of(g)) = pack_e4m3(kept[g], multiplier);
      }
    }
  }
}

// Any row: the amax pass, then the conversion reading the row again (from the
// cache the first pass filled); strided or unaligned views one element at a time.
constexpr int kRowThreads = 256;
template <typename T, bool kVectorized>
__global__ void __launch_bounds__(kRowThreads)
    rows_kernel(const T* __restrict__ src, View v, __nv_fp8_storage_t* __restrict__ dst,
                float* __restrict__ scales, RuntimeActivation act) {
  wait_for_producer();
  __shared__ unsigned warp_amax[kRowThreads / 32];
  constexpr int step = kVectorized ? kVector : 1;
  for (long long r = blockIdx.x; r < v.rows; r += gridDim.x) {
    const T* row = src + r * v.row_stride;
    unsigned local = 0;
    for (long long col = static_cast<long long>(threadIdx.x) * step; col < v.cols;
         col += static_cast<long long>(kRowThreads) * step) {
      float values[kVector];
      local = amax_bits(local, values, load_group<T, kVectorized>(row, v, col, act, values));
    }
    const float amax = __uint_as_float(block_amax<kRowThreads>(local, warp_amax));
    const float multiplier = e4m3_multiplier(amax);
    if (threadIdx.x == 0) scales[r] = e4m3_scale(amax);
    __nv_fp8_storage_t* out = dst + r * v.cols;
    for (long long col = static_cast<long long>(threadIdx.x) * step; col < v.cols;
         col += static_cast<long long>(kRowThreads) * step) {
      float values[kVector];
      load_group<T, kVectorized>(row, v, col, act, values);
      if constexpr (kVectorized) {
        *reinterpret_cast<std::uint64_t*>(out + col) = pack_e4m3(values, multiplier);
      } else {
        out[col] = __nv_cvt_float_to_fp8(values[0] * multiplier, __NV_SATFINITE, __NV_E4M3);
      }
    }
  }
}

}  // namespace ge2::cuda::quantize
