// A file descriptor written to in full, every write, flush and close checked:
// what `ge_tune export` and the GEMM record file write through.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace ge2 {

// Closed on scope exit unless close() already reported. Failures throw `status`
// with "<what>: cannot write '<name>': <reason>".
class FileWriter {
 public:
  FileWriter(int fd, std::string name, ge2_status_t status = GE2_ERROR_TUNEDB,
             std::string what = "tunedb")
      : fd_(fd), name_(std::move(name)), status_(status), what_(std::move(what)) {}
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(std::string_view text) {
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      require(n > 0, status_, "{}: cannot write '{}': {}", what_, name_,
              std::strerror(n < 0 ? errno : EIO));
      done += static_cast<std::size_t>(n);
    }
  }
  void sync() {
    require(::fsync(fd_) == 0, status_, "{}: cannot flush '{}' to disk: {}", what_, name_,
            std::strerror(errno));
  }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    require(::close(fd) == 0, status_, "{}: cannot close '{}': {}", what_, name_,
            std::strerror(errno));
  }

 private:
  int fd_;
  std::string name_;
  ge2_status_t status_;
  std::string what_;
};

}  // namespace ge2
