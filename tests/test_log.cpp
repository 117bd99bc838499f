// A context's Logger: the caller's callback or stderr, filtered by the
// context's level or $GE2_LOG_LEVEL.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "support/scoped_env.hpp"

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
    const ge2::Logger log;  // no callback: stderr, filtered by $GE2_LOG_LEVEL
    log(ge2::LogLevel::Error, "an error {}", 1);
    log(ge2::LogLevel::Warning, "a warning {}", 2);
    log(ge2::LogLevel::Info, "some info {}", 3);
  };
  ge2::test::ScopedEnv level("GE2_LOG_LEVEL", nullptr);
  CHECK(captured_stderr(both) == "ge2: error: an error 1\nge2: warning: a warning 2\n");
  level.set("off");
  CHECK(captured_stderr(both).empty());
  level.set("error");
  CHECK(captured_stderr(both) == "ge2: error: an error 1\n");
  level.set("info");
  CHECK(captured_stderr(both) ==
        "ge2: error: an error 1\nge2: warning: a warning 2\nge2: info: some info 3\n");
}

TEST_CASE("log: a callback receives the messages up to its level, with their C levels") {
  struct Received {
    std::vector<std::pair<ge2_log_level_t, std::string>> messages;
  } received;
  const ge2_log_callback_t collect = [](void* user, ge2_log_level_t level, const char* message) {
    static_cast<Received*>(user)->messages.emplace_back(level, message);
  };
  auto emit = [](const ge2::Logger& log) {
    log(ge2::LogLevel::Error, "an error {}", 1);
    log(ge2::LogLevel::Warning, "a warning {}", 2);
    log(ge2::LogLevel::Info, "some info {}", 3);
  };
  const ge2::test::ScopedEnv level("GE2_LOG_LEVEL", "info");
  // An explicit level wins over the variable; nothing reaches stderr.
  CHECK(captured_stderr([&] { emit(ge2::Logger(collect, &received, GE2_LOG_WARNING)); }).empty());
  REQUIRE(received.messages.size() == 2);
  CHECK(received.messages[0] == std::pair(GE2_LOG_ERROR, std::string("an error 1")));
  CHECK(received.messages[1] == std::pair(GE2_LOG_WARNING, std::string("a warning 2")));
  received.messages.clear();
  emit(ge2::Logger(collect, &received, GE2_LOG_DEFAULT));  // the variable: info
  CHECK(received.messages.size() == 3);
  CHECK(received.messages.back().first == GE2_LOG_INFO);
  received.messages.clear();
  emit(ge2::Logger(collect, &received, GE2_LOG_OFF));
  CHECK(received.messages.empty());
}
