// Size arithmetic that cannot overflow. Every element count, byte count and
// stride product ge2 derives from caller input goes through these helpers, so
// an absurd shape becomes an error message instead of a wrapped-around size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>

namespace ge2 {

// a * b, or nullopt when the product does not fit in int64.
constexpr std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// a + b, or nullopt when the sum does not fit in int64.
constexpr std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// The product of non-negative factors if it is at most `limit`, else nullopt.
constexpr std::optional<std::int64_t> bounded_product(std::initializer_list<std::int64_t> factors,
                                                      std::int64_t limit) {
  std::int64_t product = 1;
  for (const std::int64_t factor : factors) {
    const auto next = checked_mul(product, factor);
    if (!next || *next > limit) return std::nullopt;
    product = *next;
  }
  return product;
}

// count * element_size as a byte count, or nullopt when it does not fit in size_t.
constexpr std::optional<std::size_t> checked_bytes(std::int64_t count, std::size_t element_size) {
  if (count < 0) return std::nullopt;
  std::size_t result = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(count), element_size, &result))
    return std::nullopt;
  return result;
}

// a + b for byte counts, or nullopt when the sum does not fit in size_t.
constexpr std::optional<std::size_t> checked_add_bytes(std::size_t a, std::size_t b) {
  std::size_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

}  // namespace ge2
