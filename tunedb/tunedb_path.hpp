// Where the tuning database lives: the caller's path, $GE2_TUNEDB, or the
// user's cache directory. An empty result means "no database".
#pragma once

#include <string>

namespace ge2 {

std::string resolve_tunedb_path(const char* requested);

// The permission bits a file created with open() would get: 0666 less the
// process's umask (read without changing it). Files ge2 first creates under a
// temporary name (0600) get these before they are moved into place.
unsigned new_file_mode();

}  // namespace ge2
