// The C API boundary: runs a body, turns every exception into a status and the
// thread-local message, so that nothing throws across ge_v2_api.h. The body
// receives the API function's name: inside a lambda, __func__ would name the
// lambda's operator() instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "core/error.hpp"
#include "core/last_error.hpp"

namespace ge2 {

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
// version's fields and at most this library's. A larger struct comes from a
// newer header; its size cannot be checked against the memory behind it, so
// nothing beyond this library's struct is ever read: it is refused.
template <typename T>
void require_struct_size(const T& options, const char* function, const char* argument,
                         std::size_t oldest_size = sizeof(T)) {
  require(options.struct_size >= oldest_size, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument '{}': struct_size = {} is smaller than {}; fill it with the matching "
          "*_init function",
          function, argument, options.struct_size, oldest_size);
  require(options.struct_size <= sizeof(T), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument '{}': struct_size = {} is larger than this library's {} bytes ({}): the "
          "caller was built against a newer ge_v2_api.h; run it with a library at least as new",
          function, argument, options.struct_size, sizeof(T), GE2_VERSION_STRING);
}

// *_init_sized: the caller's struct of `caller_size` bytes (at most this
// library's) gets `defaults` in its fields; never a byte past caller_size is
// written.
template <typename T>
void init_struct(T* out, std::size_t caller_size, const T& defaults, std::size_t oldest_size,
                 const char* function, const char* argument) {
  require_not_null(out, function, argument);
  require(caller_size >= oldest_size, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'struct_size' = {} is smaller than {} (the 2.0 struct)", function,
          caller_size, oldest_size);
  require(caller_size <= sizeof(T), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'struct_size' = {} is larger than this library's {} bytes ({}): the "
          "caller was built against a newer ge_v2_api.h; run it with a library at least as new",
          function, caller_size, sizeof(T), GE2_VERSION_STRING);
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  std::memcpy(bytes, &defaults, caller_size);
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
