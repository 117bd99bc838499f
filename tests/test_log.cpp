// $GE2_LOG_LEVEL filters ge2's stderr diagnostics.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/log.hpp"

namespace {

// What ge2::log writes to stderr while `body` runs.
template <typename Body>
std::string captured_stderr(Body&& body) {
  char path[] = "/tmp/ge2-log-XXXXXX";
  const int file = mkstemp(path);
  REQUIRE(file >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(file, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  return text.str();
}

}  // namespace

TEST_CASE("log: GE2_LOG_LEVEL keeps messages at or above the level, warning by default") {
  auto both = [] {
    ge2::log(ge2::LogLevel::Error, "an error {}", 1);
    ge2::log(ge2::LogLevel::Warning, "a warning {}", 2);
    ge2::log(ge2::LogLevel::Info, "some info {}", 3);
  };
  unsetenv("GE2_LOG_LEVEL");
  CHECK(captured_stderr(both) == "ge2: error: an error 1\nge2: warning: a warning 2\n");
  setenv("GE2_LOG_LEVEL", "off", 1);
  CHECK(captured_stderr(both).empty());
  setenv("GE2_LOG_LEVEL", "error", 1);
  CHECK(captured_stderr(both) == "ge2: error: an error 1\n");
  setenv("GE2_LOG_LEVEL", "info", 1);
  CHECK(captured_stderr(both) ==
        "ge2: error: an error 1\nge2: warning: a warning 2\nge2: info: some info 3\n");
  unsetenv("GE2_LOG_LEVEL");
}
