// The C API boundary: runs a body, turns every exception into a status and the
// thread-local message, so that nothing throws across ge_v2_api.h. The body
// receives the API function's name: inside a lambda, __func__ would name the
// lambda's operator() instead.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "core/error.hpp"
#include "core/last_error.hpp"

namespace ge2 {

// Larger is taken for garbage, not for a struct of a future version.
inline constexpr std::size_t kMaxStructSize = 65536;

template <typename Body>
ge2_status_t guarded(const char* function, Body&& body) noexcept {
  try {
    body(static_cast<const char*>(function));
    return GE2_OK;
  } catch (const Error& error) {
    std::string message = error.what();
    if (message.rfind(function, 0) != 0) message = std::string(function) + ": " + message;
    set_last_error(std::move(message));
    return error.status();
  } catch (const std::bad_alloc&) {
    set_last_error(std::string(function) + ": out of host memory");
    return GE2_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& error) {
    set_last_error(std::string(function) + ": internal error: " + error.what());
    return GE2_ERROR_INTERNAL;
  } catch (...) {
    set_last_error(std::string(function) + ": internal error: unknown exception");
    return GE2_ERROR_INTERNAL;
  }
}

template <typename T>
void require_not_null(const T* pointer, const char* function, const char* argument) {
  require(pointer != nullptr, GE2_ERROR_INVALID_ARGUMENT, "{}: argument '{}' is NULL", function,
          argument);
}

// Option structs: the caller's struct_size must cover at least the oldest
// version's fields; a newer caller's fields beyond this library's must be zero
// (the caller's *_init_sized zeroed them; a value there is an option this
// library does not have).
template <typename T>
void require_struct_size(const T& options, const char* function, const char* argument,
                         std::size_t oldest_size = sizeof(T)) {
  require(options.struct_size >= oldest_size && options.struct_size <= kMaxStructSize,
          GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument '{}': struct_size = {} is not between {} and {}; fill it with the "
          "matching *_init function",
          function, argument, options.struct_size, oldest_size, kMaxStructSize);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&options);
  for (std::size_t i = sizeof(T); i < options.struct_size; ++i)
    require(bytes[i] == 0, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument '{}': byte {} of a {}-byte struct is set, but this library ({}) knows "
            "only its first {} bytes: the caller sets an option of a newer ge_v2_api.h",
            function, argument, i, options.struct_size, GE2_VERSION_STRING, sizeof(T));
}

// *_init_sized: the caller's struct of `caller_size` bytes gets `defaults` in
// the fields this library knows and zeros beyond them; never a byte past
// caller_size is written.
template <typename T>
void init_struct(T* out, std::size_t caller_size, const T& defaults, std::size_t oldest_size,
                 const char* function, const char* argument) {
  require_not_null(out, function, argument);
  require(caller_size >= oldest_size && caller_size <= kMaxStructSize, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'struct_size' = {} is not between {} (the 2.0 struct) and {}", function,
          caller_size, oldest_size, kMaxStructSize);
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  std::memcpy(bytes, &defaults, std::min(caller_size, sizeof(T)));
  if (caller_size > sizeof(T)) std::memset(bytes + sizeof(T), 0, caller_size - sizeof(T));
  const auto size = static_cast<std::uint32_t>(caller_size);
  static_assert(offsetof(T, struct_size) == 0, "struct_size is every option struct's first member");
  std::memcpy(bytes, &size, sizeof(size));
}

// Whether a caller's struct (of its struct_size) includes the member that ends
// at byte `member_end`: members appended after the caller was compiled read as defaults.
template <typename T>
bool has_member(const T& options, std::size_t member_end) {
  return options.struct_size >= member_end;
}

}  // namespace ge2
