// Reads a C enum argument as the int the C caller passed. A C caller may pass
// any int; in C++ loading an out-of-range value through the enum type is
// undefined, so validation reads the object representation instead.
#pragma once

#include <cstring>
#include <type_traits>

namespace ge2 {

template <typename Enum>
int raw_enum(const Enum& value) {
  static_assert(std::is_enum_v<Enum> && sizeof(Enum) == sizeof(int), "a 32-bit C enum");
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

}  // namespace ge2
