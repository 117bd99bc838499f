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

// The per-element work of an elementwise pass, out = act(combine(x_act(x), y)
// + bias), in two forms with one interface: FixedOp has the activations and the
// combine as template parameters (the common passes: an activation alone, a
// multiply with an activated first operand, an add), RuntimeOp reads them from
// the kernel parameters (any other combination, and the strided kernel).
// kCombine / combine: 0 none, 1 add, 2 multiply.
template <typename XAct, int kCombine, typename Act>
struct FixedOp {
  __device__ __forceinline__ bool reads_y() const { return kCombine != 0; }
  __device__ __forceinline__ float combine(float x, float y) const {
    if constexpr (kCombine == 1) return XAct{}(x) + y;
    if constexpr (kCombine == 2) return XAct{}(x)*y;
    return x;
  }
  __device__ __forceinline__ float finish(float v) const { return Act{}(v); }
};

struct RuntimeOp {
  int combine_kind, x_act, act;
  __device__ __forceinline__ bool reads_y() const { return combine_kind != 0; }
  __device__ __forceinline__ float combine(float x, float y) const {
    if (combine_kind == 0) return x;
    x = activate(x_act, x);
    return combine_kind == 1 ? x + y : x * y;
  }
  __device__ __forceinline__ float finish(float v) const { return activate(act, v); }
};

// `op` on each element of one 16-byte vector; bias only with has_bias.
template <typename T, typename Op>
__device__ __forceinline__ uint4 apply_vector(const Op& op, uint4 x, uint4 y, bool has_bias,
                                              uint4 bias) {
  const T* values = reinterpret_cast<const T*>(&x);
  const T* others = reinterpret_cast<const T*>(&y);
  const T* b = reinterpret_cast<const T*>(&bias);
  uint4 result;
  T* r = reinterpret_cast<T*>(&result);
#pragma unroll
  for (int e = 0; e < static_cast<int>(16 / sizeof(T)); ++e) {
    float value = op.combine(to_float(values[e]), to_float(others[e]));
    if (has_bias) value += to_float(b[e]);
    r[e] = from_float<T>(op.finish(value));
  }
  return result;
}

// act(x) on one vector (the staging copy's optional activation).
template <typename T>
__device__ __forceinline__ uint4 act_vector(uint4 x, int act) {
  return apply_vector<T>(RuntimeOp{0, 0, act}, x, uint4{}, false, uint4{});
}

}  // namespace ge2::cuda
