// Internal error type. C++ code inside ge2 throws ge2::Error; the C API boundary
// (src/api/api_guard.hpp) converts it into a status and the thread-local message.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "ge_v2_api.h"

namespace ge2 {

class Error : public std::runtime_error {
 public:
  Error(ge2_status_t status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  ge2_status_t status() const noexcept { return status_; }

 private:
  ge2_status_t status_;
};

template <typename... Args>
[[noreturn]] void fail(ge2_status_t status, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

// Checks a precondition on a named argument; the message always names it.
template <typename... Args>
void require(bool condition, ge2_status_t status, fmt::format_string<Args...> format,
             Args&&... args) {
  if (!condition) throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ge2
