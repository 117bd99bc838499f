// ge2's diagnostics (a degraded tuning database, a stale tuned row, AUTO
// falling back to the CPU): each context's Logger delivers them to the
// caller's ge2_log_callback_t, or to stderr as "ge2: warning: ...", filtered
// by the context's log level, which defaults to $GE2_LOG_LEVEL ("off",
// "error", "warning" -- the default -- or "info"). The variable is read per
// message: messages are rare, and a program may set it after loading ge2.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ge_v2_api.h"

namespace ge2 {

enum class LogLevel { Off = 0, Error = 1, Warning = 2, Info = 3 };

inline LogLevel log_level_from_env() {
  const char* text = std::getenv("GE2_LOG_LEVEL");
  if (text == nullptr) return LogLevel::Warning;
  const std::string_view level(text);
  if (level == "off" || level == "none" || level == "0") return LogLevel::Off;
  if (level == "error") return LogLevel::Error;
  if (level == "info" || level == "debug") return LogLevel::Info;
  return LogLevel::Warning;  // "warning" and anything unknown: the default
}

// The C level of a message (GE2_LOG_ERROR ... GE2_LOG_INFO).
constexpr ge2_log_level_t c_log_level(LogLevel level) {
  return static_cast<ge2_log_level_t>(static_cast<int>(level) + GE2_LOG_OFF);
}

class Logger {
 public:
  // stderr, filtered by $GE2_LOG_LEVEL.
  Logger() = default;
  // `level` GE2_LOG_DEFAULT: $GE2_LOG_LEVEL; callback nullptr: stderr.
  Logger(ge2_log_callback_t callback, void* user_data, ge2_log_level_t level)
      : callback_(callback), user_data_(user_data), level_(level) {}

  bool enabled(LogLevel level) const { return level != LogLevel::Off && level <= threshold(); }

  template <typename... Args>
  void operator()(LogLevel level, fmt::format_string<Args...> format, Args&&... args) const {
    if (!enabled(level)) return;
    deliver(level, fmt::format(format, std::forward<Args>(args)...));
  }

 private:
  LogLevel threshold() const {
    if (level_ == GE2_LOG_DEFAULT) return log_level_from_env();
    return static_cast<LogLevel>(static_cast<int>(level_) - GE2_LOG_OFF);
  }
  void deliver(LogLevel level, const std::string& message) const {
    if (callback_ != nullptr) {
      callback_(user_data_, c_log_level(level), message.c_str());
      return;
    }
    constexpr const char* kNames[] = {"", "error", "warning", "info"};
    fmt::print(stderr, "ge2: {}: {}\n", kNames[static_cast<int>(level)], message);
  }

  ge2_log_callback_t callback_ = nullptr;
  void* user_data_ = nullptr;
  ge2_log_level_t level_ = GE2_LOG_DEFAULT;
};

}  // namespace ge2
