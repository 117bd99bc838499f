// Element types and the scalar conversions the CPU backend and tests share.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "ge_v2_api.h"

namespace ge2 {

enum class DType : int { F16 = GE2_DTYPE_F16, BF16 = GE2_DTYPE_BF16, F32 = GE2_DTYPE_F32 };

bool is_valid_dtype(int value);
std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);

// IEEE binary16 <-> float, round to nearest even, with subnormals, inf and NaN.
std::uint16_t float_to_half_bits(float value);
float half_bits_to_float(std::uint16_t bits);
// bfloat16 <-> float, round to nearest even; NaN stays NaN.
std::uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(std::uint16_t bits);

// Reads element `index` of a buffer of `dtype` as float.
inline float load_as_float(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::F16:
      return half_bits_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::BF16:
      return bf16_bits_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::F32:
      return static_cast<const float*>(base)[index];
  }
  return 0.0f;
}

// Writes a float into element `index` of a buffer of `dtype`, rounding to nearest even.
inline void store_from_float(void* base, DType dtype, std::int64_t index, float value) {
  switch (dtype) {
    case DType::F16:
      static_cast<std::uint16_t*>(base)[index] = float_to_half_bits(value);
      return;
    case DType::BF16:
      static_cast<std::uint16_t*>(base)[index] = float_to_bf16_bits(value);
      return;
    case DType::F32:
      static_cast<float*>(base)[index] = value;
      return;
  }
}

}  // namespace ge2
