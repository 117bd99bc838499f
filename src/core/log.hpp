// ge2's diagnostics on stderr, filtered by $GE2_LOG_LEVEL: "off", "error",
// "warning" (the default) or "info". Read at each message: messages are rare
// (a degraded tuning database, a stale tuned row), and a program may set the
// variable after loading the library.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

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

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (level > log_level_from_env()) return;
  constexpr const char* kNames[] = {"", "error", "warning", "info"};
  fmt::print(stderr, "ge2: {}: {}\n", kNames[static_cast<int>(level)],
             fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ge2
