// Element types and the scalar conversions the CPU backend and tests share.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/host_device.hpp"
#include "ge_v2_api.h"

namespace ge2 {

enum class DType : int {
  F16 = GE2_DTYPE_F16,
  BF16 = GE2_DTYPE_BF16,
  F32 = GE2_DTYPE_F32,
  F8E4M3 = GE2_DTYPE_F8_E4M3  // storage only: a quantized constant's data
};

// IEEE binary16 <-> float, round to nearest even, with subnormals, inf and NaN.
std::uint16_t float_to_half_bits(float value);
float half_bits_to_float(std::uint16_t bits);
// bfloat16 <-> float, round to nearest even; NaN stays NaN.
std::uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(std::uint16_t bits);
// FP8 e4m3 (OCP "fn": no infinities, one NaN code per sign, largest finite 448)
// <-> float, round to nearest even, saturating finite values and infinities
// at +-448 as the device's __NV_SATFINITE conversion does; NaN stays NaN.
// Used by the precision policy's FP8 GEMMs (docs/fp8.md) and quantized constants.
inline constexpr float kE4M3Max = 448.0f;
std::uint8_t float_to_e4m3_bits(float value);
float e4m3_bits_to_float(std::uint8_t bits);
// e4m3 scaling of one row (lt_fp8_e4m3 scales each row of A and each output
// channel of B), host and device: x is stored as e4m3(x * multiplier) and read back
// times the scale. An all-zero row (amax 0) uses 1; a NaN amax makes both NaN, so
// that row of the product is NaN, as the 16-bit GEMM would spread it.
GE2_HOST_DEVICE float e4m3_multiplier(float amax) { return amax == 0.0f ? 1.0f : kE4M3Max / amax; }
GE2_HOST_DEVICE float e4m3_scale(float amax) { return amax == 0.0f ? 1.0f : amax / kE4M3Max; }

// One row per dtype: what every host layer reads. The CUDA types live in
// backends/cuda/dtype_dispatch.cuh, one row each as well.
struct DTypeInfo {
  DType id;
  std::string_view name;
  std::size_t bytes;
  float (*load)(const void* base, std::int64_t index);         // element as float
  void (*store)(void* base, std::int64_t index, float value);  // rounds to nearest even
  // A type values are computed in (graph values, one-shot GEMMs); the others only
  // store a quantized constant's data (ge2_graph_add_quantized_constant).
  bool computes = true;
};

namespace detail {
inline float load_f16(const void* b, std::int64_t i) {
  return half_bits_to_float(static_cast<const std::uint16_t*>(b)[i]);
}
inline float load_bf16(const void* b, std::int64_t i) {
  return bf16_bits_to_float(static_cast<const std::uint16_t*>(b)[i]);
}
inline float load_f32(const void* b, std::int64_t i) { return static_cast<const float*>(b)[i]; }
inline void store_f16(void* b, std::int64_t i, float v) {
  static_cast<std::uint16_t*>(b)[i] = float_to_half_bits(v);
}
inline void store_bf16(void* b, std::int64_t i, float v) {
  static_cast<std::uint16_t*>(b)[i] = float_to_bf16_bits(v);
}
inline void store_f32(void* b, std::int64_t i, float v) { static_cast<float*>(b)[i] = v; }
inline float load_e4m3(const void* b, std::int64_t i) {
  return e4m3_bits_to_float(static_cast<const std::uint8_t*>(b)[i]);
}
inline void store_e4m3(void* b, std::int64_t i, float v) {
  static_cast<std::uint8_t*>(b)[i] = float_to_e4m3_bits(v);
}
}  // namespace detail

// Indexed by the C value minus one (GE2_DTYPE_F16 = 1).
inline constexpr std::array<DTypeInfo, 4> kDTypes{{
    {DType::F16, "f16", 2, detail::load_f16, detail::store_f16},
    {DType::BF16, "bf16", 2, detail::load_bf16, detail::store_bf16},
    {DType::F32, "f32", 4, detail::load_f32, detail::store_f32},
    {DType::F8E4M3, "f8_e4m3", 1, detail::load_e4m3, detail::store_e4m3, false},
}};
static_assert(
    [] {
      for (std::size_t i = 0; i < kDTypes.size(); ++i)
        if (static_cast<std::size_t>(kDTypes[i].id) != i + 1) return false;
      return kDTypes.size() == GE2_DTYPE_F8_E4M3;
    }(),
    "kDTypes: one row per ge2_dtype_t value, in order from GE2_DTYPE_F16 = 1");

// Any row of kDTypes, storage-only ones included.
constexpr bool is_known_dtype(int value) {
  return value >= 1 && value <= static_cast<int>(kDTypes.size());
}
constexpr const DTypeInfo& dtype_info(DType dtype) {
  return kDTypes[static_cast<std::size_t>(static_cast<int>(dtype) - 1)];
}
constexpr std::size_t dtype_size(DType dtype) { return dtype_info(dtype).bytes; }
constexpr std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }

// Why `value` cannot be the dtype of a computed value ("" when it can): unknown,
// or a storage-only row, named with where to use it.
std::string compute_dtype_problem(int value);

// Reads element `index` of a buffer of `dtype` as float.
inline float load_as_float(const void* base, DType dtype, std::int64_t index) {
  return dtype_info(dtype).load(base, index);
}
// Writes a float into element `index` of a buffer of `dtype`, rounding to nearest even.
inline void store_from_float(void* base, DType dtype, std::int64_t index, float value) {
  dtype_info(dtype).store(base, index, value);
}

}  // namespace ge2
