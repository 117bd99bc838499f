#include "core/dtype.hpp"

#include <bit>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace ge2 {

std::uint16_t float_to_half_bits(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaN quiet and non-zero
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero in half
    // Scale into the subnormal range exactly and let the FPU round to nearest even.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // 2^24
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(scaled)));
  }
  const std::uint32_t mantissa_odd = (abs >> 13) & 1u;
  const std::uint32_t rounded = abs + 0xfffu + mantissa_odd;  // round to nearest even
  return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float half_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint8_t float_to_e4m3_bits(float value) {
  const std::uint8_t sign = std::signbit(value) ? 0x80u : 0x00u;
  if (std::isnan(value)) return static_cast<std::uint8_t>(sign | 0x7fu);
  const float magnitude = std::fabs(value);
  if (magnitude >= kE4M3Max) return static_cast<std::uint8_t>(sign | 0x7eu);
  if (magnitude < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9; 8 steps is 2^-6 itself
    return static_cast<std::uint8_t>(sign |
                                     static_cast<std::uint8_t>(std::nearbyint(magnitude * 512.0f)));
  }
  int exponent = 0;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent
  --exponent;                                               // now 1 <= magnitude / 2^exponent < 2
  auto mantissa = static_cast<int>(std::nearbyint((2.0f * fraction - 1.0f) * 8.0f));
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  // magnitude < 448 rounds to 448 at most: exponent + 7 <= 15, mantissa <= 6 there.
  return static_cast<std::uint8_t>(sign | ((exponent + 7) << 3) | mantissa);
}

float e4m3_bits_to_float(std::uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 15 && mantissa == 7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return (bits & 0x80u) ? -magnitude : magnitude;
}

std::string compute_dtype_problem(int value) {
  if (!is_known_dtype(value)) return fmt::format("{} is not a ge2_dtype_t", value);
  const DTypeInfo& info = dtype_info(static_cast<DType>(value));
  if (!info.computes)
    return fmt::format(
        "{} ({}) is a storage type only: quantized constants take it "
        "(ge2_graph_add_quantized_constant)",
        value, info.name);
  return "";
}

}  // namespace ge2
