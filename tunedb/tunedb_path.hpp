// Where the tuning database lives: the caller's path, $GE2_TUNEDB, or the
// user's cache directory. An empty result means "no database".
#pragma once

#include <string>

namespace ge2 {

std::string resolve_tunedb_path(const char* requested);

}  // namespace ge2
