#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/tensor_type.hpp"

using namespace ge2;

TEST_CASE("half conversion: exact values, rounding, subnormals, inf and NaN") {
  CHECK(float_to_half_bits(1.0f) == 0x3c00);
  CHECK(float_to_half_bits(-2.0f) == 0xc000);
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);            // rounds to inf
  CHECK(float_to_half_bits(5.9604645e-8f) == 0x0001);       // smallest subnormal
  CHECK(float_to_half_bits(1.0f + 1.0f / 2048) == 0x3c00);  // halfway rounds to even (down)
  CHECK(float_to_half_bits(1.0f + 3.0f / 2048) == 0x3c02);  // halfway rounds to even (up)
  CHECK(float_to_half_bits(1.0f + 3.0f / 4096) == 0x3c01);  // above halfway rounds up
  CHECK(
      std::isnan(half_bits_to_float(float_to_half_bits(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(half_bits_to_float(0x7c00) == std::numeric_limits<float>::infinity());
  for (std::uint32_t bits = 0; bits < 0x7c00; ++bits) {  // every finite positive half round-trips
    REQUIRE(float_to_half_bits(half_bits_to_float(static_cast<std::uint16_t>(bits))) == bits);
  }
}

TEST_CASE("half to float: every bit pattern, as the format defines it") {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const std::uint32_t sign = bits >> 15, exponent = (bits >> 10) & 0x1fu,
                        mantissa = bits & 0x3ffu;
    const float got = half_bits_to_float(static_cast<std::uint16_t>(bits));
    if (exponent == 31) {  // inf, or NaN with its payload in the top mantissa bits
      REQUIRE(std::bit_cast<std::uint32_t>(got) == ((sign << 31) | 0x7f800000u | (mantissa << 13)));
      continue;
    }
    const double magnitude = exponent == 0
                                 ? std::ldexp(static_cast<double>(mantissa), -24)
                                 : std::ldexp(1024.0 + mantissa, static_cast<int>(exponent) - 25);
    const double want = sign ? -magnitude : magnitude;
    REQUIRE(static_cast<double>(got) == want);
    REQUIRE(std::signbit(got) == (sign != 0));  // -0 stays -0
  }
}

TEST_CASE("bf16 conversion: rounding to nearest even and NaN") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(bf16_bits_to_float(0x3f80) == 1.0f);
  CHECK(float_to_bf16_bits(1.0f + 1.0f / 256) == 0x3f80);  // halfway to even
  CHECK(float_to_bf16_bits(1.0f + 3.0f / 256) == 0x3f82);
  CHECK(
      std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("tensor types: dense strides, spans and overlap") {
  const TensorType t = TensorType::dense(DType::F16, 3, {2, 3, 4});
  CHECK(t.strides[0] == 12);
  CHECK(t.strides[1] == 4);
  CHECK(t.strides[2] == 1);
  CHECK(t.span_bytes() == 48);
  ge2_tensor_desc_t desc = t.to_desc();
  desc.strides[1] = 1;
  desc.strides[2] = 3;  // column-major inner matrix: legal
  desc.strides[0] = 12;
  CHECK_NOTHROW(tensor_type_from_desc(desc, "test"));
  desc.strides[2] = 2;  // columns 2 apart with 3 rows 1 apart: overlap
  CHECK_THROWS_AS(tensor_type_from_desc(desc, "test"), Error);
}
