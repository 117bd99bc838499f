// The one piece of global mutable state in ge2: the per-thread last-error message
// that ge2_last_error() returns (documented in ge_v2_api.h).
#pragma once

#include <string>

namespace ge2 {

void set_last_error(std::string message);
const char* last_error();

}  // namespace ge2
