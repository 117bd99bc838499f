// Directories for the files tests write (tuning databases, record files), under
// the system's temporary directory and removed again: a test run leaves nothing
// behind in /tmp.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace ge2::test {

// <temp>/ge2-<name>-<pid>, made empty, removed with everything in it when the object goes.
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view name)
      : path_(std::filesystem::temp_directory_path() /
              ("ge2-" + std::string(name) + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;  // a destructor reports nothing; a leftover is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A fresh, empty subdirectory `name` of this process's scratch directory, which goes
// at the process's normal exit (a forked child that ends with _exit leaves it to
// its parent; a crashed run leaves it for the next run of the same pid).
inline std::filesystem::path scratch_subdir(std::string_view name) {
  static const ScratchDir root("tests");
  const std::filesystem::path dir = root.path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace ge2::test
