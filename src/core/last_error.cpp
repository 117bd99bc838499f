#include "core/last_error.hpp"

namespace ge2 {
namespace {
thread_local std::string t_last_error;
}

void set_last_error(std::string message) { t_last_error = std::move(message); }
const char* last_error() { return t_last_error.c_str(); }

}  // namespace ge2
