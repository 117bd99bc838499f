// An environment variable set for a scope and given back its earlier value (or
// unset again) at the scope's end, also when a REQUIRE ends the test case early.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace ge2::test {

class ScopedEnv {
 public:
  // `value` nullptr: the variable is unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = before;
    set(value);
  }
  ~ScopedEnv() { set(before_ ? before_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const char* value) {
    if (value != nullptr)
      setenv(name_.c_str(), value, 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> before_;
};

}  // namespace ge2::test
