// Device-side element conversion; activations come from core/activation.hpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/activation.hpp"

namespace ge2::cuda {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Kernel parameter blocks carry the activation as its C value.
__device__ __forceinline__ float activate(int act, float x) {
  return apply_activation(static_cast<Activation>(act), x);
}

// act(combine(x_act(x), y) + bias) on each element of one 16-byte vector: y and
// x_act only with combine (1 add, 2 multiply), bias only with has_bias.
template <typename T>
__device__ __forceinline__ uint4 bias_act_vector(uint4 x, bool has_bias, uint4 bias, int act,
                                                 int combine = 0, uint4 y = {}, int x_act = 0) {
  const T* values = reinterpret_cast<const T*>(&x);
  const T* b = reinterpret_cast<const T*>(&bias);
  const T* others = reinterpret_cast<const T*>(&y);
  uint4 result;
  T* r = reinterpret_cast<T*>(&result);
#pragma unroll
  for (int e = 0; e < static_cast<int>(16 / sizeof(T)); ++e) {
    float value = to_float(values[e]);
    if (combine != 0) {
      value = activate(x_act, value);
      const float other = to_float(others[e]);
      value = combine == 1 ? value + other : value * other;
    }
    if (has_bias) value += to_float(b[e]);
    r[e] = from_float<T>(activate(act, value));
  }
  return result;
}

}  // namespace ge2::cuda
