// Row-wise FP8 e4m3 quantization of a 16-bit matrix for lt_fp8_e4m3: each row
// gets its own scale. One block per row (grid-stride over the rows) finds the
// row's amax = max |x| (compared as float bits, so a NaN, whose bits exceed
// infinity's, wins and makes that row's scale NaN), then converts x * 448 / amax
// with the device's saturating round-to-nearest-even conversion into a dense
// row-major copy and stores the row's dequantization scale amax / 448. The
// second read of a row hits the cache the first one filled: one pass over
// memory, no atomics, no host synchronization (capturable). The host formula
// (core/dtype.hpp, cpu_fp8_ref) is the same arithmetic. A deferred activation
// (GemmProblem::a_act) is applied to each element as it is loaded and rounded
// to the 16-bit dtype: the values the producing GEMM would have stored.
#include <cuda_fp8.h>

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

constexpr int kThreads = 256;
constexpr int kVector = 8;  // 16-bit elements per 16-byte load

struct QuantizeView {
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

// Elements [col, col + count) of one row as floats, `act` applied: a 16-byte load
// of 8 consecutive elements where the view allows it, else one strided element.
template <typename T, bool kVectorized, typename Act>
__device__ __forceinline__ int load_group(const T* row, const QuantizeView& v, long long col,
                                          const Act& act, float (&values)[kVector]) {
  if constexpr (kVectorized) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + col);
    const T* elements = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kVector; ++i) values[i] = activated(act, elements[i]);
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

// Rows of at most kThreads * kVector * kGroups 16-bit elements, 16-byte aligned:
// each thread keeps its kGroups groups of 8 in registers between the amax and the
// conversion, so a row is read once and all its loads are in flight together.
template <typename T, int kGroups, typename Act>
__global__ void __launch_bounds__(kThreads)
    quantize_short_rows_kernel(const T* __restrict__ src, QuantizeView v,
                               __nv_fp8_storage_t* __restrict__ dst, float* __restrict__ scales,
                               Act act) {
  wait_for_producer();
  __shared__ unsigned warp_amax[kThreads / 32];
  for (long long r = blockIdx.x; r < v.rows; r += gridDim.x) {
    const T* row = src + r * v.row_stride;
    float values[kGroups][kVector];
    unsigned local = 0;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const long long col = (static_cast<long long>(g) * kThreads + threadIdx.x) * kVector;
      if (col < v.cols) {
        load_group<T, true>(row, v, col, act, values[g]);
#pragma unroll
        for (int i = 0; i < kVector; ++i) local = max(local, __float_as_uint(fabsf(values[g][i])));
      }
    }
    const float amax = __uint_as_float(block_amax(local, warp_amax));
    const float multiplier = e4m3_multiplier(amax);
    if (threadIdx.x == 0) scales[r] = e4m3_scale(amax);
    __nv_fp8_storage_t* out = dst + r * v.cols;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const long long col = (static_cast<long long>(g) * kThreads + threadIdx.x) * kVector;
      if (col < v.cols)
        *reinterpret_cast<std::uint64_t*>(out + col) = pack_e4m3(values[g], multiplier);
    }
  }
}

// Any row: the amax pass, then the conversion reading the row again (from the
// cache the first pass filled); strided or unaligned views one element at a time.
template <typename T, bool kVectorized>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const T* __restrict__ src, QuantizeView v,
                         __nv_fp8_storage_t* __restrict__ dst, float* __restrict__ scales,
                         RuntimeActivation act) {
  wait_for_producer();
  __shared__ unsigned warp_amax[kThreads / 32];
  constexpr int step = kVectorized ? kVector : 1;
  for (long long r = blockIdx.x; r < v.rows; r += gridDim.x) {
    const T* row = src + r * v.row_stride;
    unsigned local = 0;
    for (long long col = static_cast<long long>(threadIdx.x) * step; col < v.cols;
         col += static_cast<long long>(kThreads) * step) {
      float values[kVector];
      const int count = load_group<T, kVectorized>(row, v, col, act, values);
      for (int i = 0; i < count; ++i) local = max(local, __float_as_uint(fabsf(values[i])));
    }
    const float amax = __uint_as_float(block_amax(local, warp_amax));
    const float multiplier = e4m3_multiplier(amax);
    if (threadIdx.x == 0) scales[r] = e4m3_scale(amax);
    __nv_fp8_storage_t* out = dst + r * v.cols;
    for (long long col = static_cast<long long>(threadIdx.x) * step; col < v.cols;
         col += static_cast<long long>(kThreads) * step) {
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

// Groups of 8 per thread the register path holds: rows up to 16384 elements (K of
// FFN layers); longer rows take quantize_rows_kernel.
constexpr int kShortRowGroups = 8;

}  // namespace

void launch_quantize_e4m3_rows(DType dtype, const MatrixView& src, const void* src_data,
                               std::uint8_t* dst, float* row_scales, int sm_count,
                               cudaStream_t stream, Activation act) {
  require(dtype != DType::F32, GE2_ERROR_INTERNAL, "e4m3 quantization takes f16 or bf16");
  const QuantizeView view{src.rows, src.cols, src.row_stride, src.col_stride};
  // The dense copy's rows start every `cols` bytes: 8-byte stores need cols % 8 == 0.
  const bool vectorized = src.col_stride == 1 && src.cols % kVector == 0 &&
                          src.row_stride % kVector == 0 && misalignment_bytes(src_data) == 0 &&
                          misalignment_bytes(dst) % 8 == 0;
  const auto blocks =
      static_cast<unsigned>(std::clamp<long long>(src.rows, 1, 16LL * std::max(1, sm_count)));
  with_cuda_type(dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    if constexpr (!std::is_same_v<T, float>) {
      const auto* typed = static_cast<const T*>(src_data);
      auto* out = reinterpret_cast<__nv_fp8_storage_t*>(dst);
      if (vectorized && src.cols <= kThreads * kVector * kShortRowGroups) {
        visit_activation(act, [&](auto functor) {
          GE2_CUDA_CHECK(launch_dependent(
              true, quantize_short_rows_kernel<T, kShortRowGroups, decltype(functor)>, dim3(blocks),
              dim3(kThreads), 0, stream, typed, view, out, row_scales, functor));
        });
        return;
      }
      auto kernel = vectorized ? quantize_rows_kernel<T, true> : quantize_rows_kernel<T, false>;
      GE2_CUDA_CHECK(launch_dependent(true, kernel, dim3(blocks), dim3(kThreads), 0, stream, typed,
                                      view, out, row_scales,
                                      RuntimeActivation{static_cast<int>(act)}));
    }
  });
}

}  // namespace ge2::cuda
