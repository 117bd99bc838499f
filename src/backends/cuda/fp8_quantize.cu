// Per-tensor FP8 e4m3 quantization of a 16-bit matrix for lt_fp8_e4m3: one pass
// finds amax = max |x| (its float bits, so atomicMax on unsigned orders them and
// a NaN, whose bits exceed infinity's, wins), a second converts x * 448 / amax
// with the device's saturating round-to-nearest-even conversion into a dense
// row-major copy and stores the dequantization scale amax / 448. Both passes read
// amax from device memory: no host synchronization, so the step is capturable.
// The host formula (core/dtype.cpp, cpu_fp8_ref) is the same arithmetic.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/dtype_dispatch.cuh"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/launch_geometry.cuh"
#include "core/activation.hpp"

namespace ge2::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVector = 8;  // 16-bit elements per 16-byte load

struct QuantizeView {
  long long rows, cols, row_stride, col_stride;
};

template <typename T, bool kVectorized>
__device__ __forceinline__ void load_group(const T* src, const QuantizeView& v, long long group,
                                           float (&values)[kVector], int& count) {
  if constexpr (kVectorized) {
    const long long groups_per_row = v.cols / kVector;
    const long long row = group / groups_per_row, col = (group % groups_per_row) * kVector;
    const uint4 raw = *reinterpret_cast<const uint4*>(src + row * v.row_stride + col);
    const T* elements = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kVector; ++i) values[i] = to_float(elements[i]);
    count = kVector;
  } else {
    const long long row = group / v.cols, col = group % v.cols;
    values[0] = to_float(src[row * v.row_stride + col * v.col_stride]);
    count = 1;
  }
}

template <typename T, bool kVectorized>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const T* __restrict__ src, QuantizeView v, unsigned* __restrict__ amax_bits) {
  const long long groups = kVectorized ? v.rows * (v.cols / kVector) : v.rows * v.cols;
  unsigned local = 0;
  for (long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<long long>(gridDim.x) * blockDim.x) {
    float values[kVector];
    int count = 0;
    load_group<T, kVectorized>(src, v, g, values, count);
    for (int i = 0; i < count; ++i) local = max(local, __float_as_uint(fabsf(values[i])));
  }
  for (int offset = 16; offset > 0; offset /= 2)
    local = max(local, __shfl_xor_sync(0xffffffffu, local, offset));
  if ((threadIdx.x & 31) == 0 && local != 0) atomicMax(amax_bits, local);
}

template <typename T, bool kVectorized>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const T* __restrict__ src, QuantizeView v, __nv_fp8_storage_t* __restrict__ dst,
                    const unsigned* __restrict__ amax_bits, float* __restrict__ scale) {
  const float amax = __uint_as_float(*amax_bits);
  const float multiplier = e4m3_multiplier(amax);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale = e4m3_scale(amax);
  const long long groups = kVectorized ? v.rows * (v.cols / kVector) : v.rows * v.cols;
  for (long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<long long>(gridDim.x) * blockDim.x) {
    float values[kVector];
    int count = 0;
    load_group<T, kVectorized>(src, v, g, values, count);
    if constexpr (kVectorized) {
      // The group's 8 elements are consecutive in the dense copy too: one 8-byte store.
      std::uint64_t packed = 0;
#pragma unroll
      for (int i = 0; i < kVector; ++i)
        packed |= static_cast<std::uint64_t>(
                      __nv_cvt_float_to_fp8(values[i] * multiplier, __NV_SATFINITE, __NV_E4M3))
                  << (8 * i);
      *reinterpret_cast<std::uint64_t*>(dst + g * kVector) = packed;
    } else {
      dst[g] = __nv_cvt_float_to_fp8(values[0] * multiplier, __NV_SATFINITE, __NV_E4M3);
    }
  }
}

// x = act(x) in place, and amax of the result: a producer's separate activation
// pass that also hands the next FP8 GEMM its A's amax.
template <typename T, bool kVectorized, typename Activation>
__global__ void __launch_bounds__(kThreads)
    activation_amax_kernel(T* __restrict__ data, QuantizeView v, Activation act,
                           unsigned* __restrict__ amax_bits) {
  const long long groups = kVectorized ? v.rows * (v.cols / kVector) : v.rows * v.cols;
  unsigned local = 0;
  for (long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<long long>(gridDim.x) * blockDim.x) {
    if constexpr (kVectorized) {
      const long long groups_per_row = v.cols / kVector;
      const long long row = g / groups_per_row, col = (g % groups_per_row) * kVector;
      uint4* address = reinterpret_cast<uint4*>(data + row * v.row_stride + col);
      uint4 raw = *address;
      T* elements = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int i = 0; i < kVector; ++i) {
        elements[i] = from_float<T>(act(to_float(elements[i])));
        local = max(local, __float_as_uint(fabsf(to_float(elements[i]))));
      }
      *address = raw;
    } else {
      T* address = data + (g / v.cols) * v.row_stride + (g % v.cols) * v.col_stride;
      *address = from_float<T>(act(to_float(*address)));
      local = max(local, __float_as_uint(fabsf(to_float(*address))));
    }
  }
  for (int offset = 16; offset > 0; offset /= 2)
    local = max(local, __shfl_xor_sync(0xffffffffu, local, offset));
  if ((threadIdx.x & 31) == 0 && local != 0) atomicMax(amax_bits, local);
}

struct Launch {
  QuantizeView view;
  bool vectorized;
  unsigned blocks;
};

Launch launch_shape(const MatrixView& src, const void* data, int sm_count) {
  Launch l{{src.rows, src.cols, src.row_stride, src.col_stride}, false, 1};
  l.vectorized = src.col_stride == 1 && src.cols % kVector == 0 && src.row_stride % kVector == 0 &&
                 misalignment_bytes(data) == 0;
  const long long groups = l.vectorized ? src.rows * (src.cols / kVector) : src.rows * src.cols;
  const long long wanted = (groups + kThreads - 1) / kThreads;
  l.blocks = static_cast<unsigned>(
      std::max<long long>(1, std::min<long long>(wanted, 8LL * std::max(1, sm_count))));
  return l;
}

// f(T{}) for the 16-bit device type of `dtype`: e4m3 quantization takes f16 and bf16.
template <typename F>
void with_16bit_type(DType dtype, F&& f) {
  require(dtype != DType::F32, GE2_ERROR_INTERNAL, "e4m3 quantization takes f16 or bf16");
  with_cuda_type(dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    if constexpr (!std::is_same_v<T, float>) f(T{});
  });
  GE2_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_amax(DType dtype, const MatrixView& src, const void* src_data, unsigned* amax_bits,
                 int sm_count, cudaStream_t stream) {
  const Launch l = launch_shape(src, src_data, sm_count);
  GE2_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream));
  with_16bit_type(dtype, [&](auto element) {
    using T = decltype(element);
    const auto* typed = static_cast<const T*>(src_data);
    if (l.vectorized) {
      amax_kernel<T, true><<<l.blocks, kThreads, 0, stream>>>(typed, l.view, amax_bits);
    } else {
      amax_kernel<T, false><<<l.blocks, kThreads, 0, stream>>>(typed, l.view, amax_bits);
    }
  });
}

void launch_convert_e4m3(DType dtype, const MatrixView& src, const void* src_data,
                         std::uint8_t* dst, const unsigned* amax_bits, float* scale, int sm_count,
                         cudaStream_t stream) {
  const Launch l = launch_shape(src, src_data, sm_count);
  with_16bit_type(dtype, [&](auto element) {
    using T = decltype(element);
    const auto* typed = static_cast<const T*>(src_data);
    auto* out = reinterpret_cast<__nv_fp8_storage_t*>(dst);
    if (l.vectorized) {
      quantize_kernel<T, true>
          <<<l.blocks, kThreads, 0, stream>>>(typed, l.view, out, amax_bits, scale);
    } else {
      quantize_kernel<T, false>
          <<<l.blocks, kThreads, 0, stream>>>(typed, l.view, out, amax_bits, scale);
    }
  });
}

void launch_activation_amax(DType dtype, Activation act, const MatrixView& data_view, void* data,
                            unsigned* amax_bits, int sm_count, cudaStream_t stream) {
  const Launch l = launch_shape(data_view, data, sm_count);
  GE2_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream));
  with_16bit_type(dtype, [&](auto element) {
    using T = decltype(element);
    auto* typed = static_cast<T*>(data);
    visit_activation(act, [&](auto functor) {
      using F = decltype(functor);
      if (l.vectorized) {
        activation_amax_kernel<T, true, F>
            <<<l.blocks, kThreads, 0, stream>>>(typed, l.view, functor, amax_bits);
      } else {
        activation_amax_kernel<T, false, F>
            <<<l.blocks, kThreads, 0, stream>>>(typed, l.view, functor, amax_bits);
      }
      return 0;
    });
  });
}

void launch_quantize_e4m3(DType dtype, const MatrixView& src, const void* src_data,
                          std::uint8_t* dst, unsigned* amax_bits, float* scale, int sm_count,
                          cudaStream_t stream) {
  launch_amax(dtype, src, src_data, amax_bits, sm_count, stream);
  launch_convert_e4m3(dtype, src, src_data, dst, amax_bits, scale, sm_count, stream);
}

}  // namespace ge2::cuda
