#include "tunedb/tunedb_path.hpp"

#include <cstdlib>

namespace ge2 {

std::string resolve_tunedb_path(const char* requested) {
  if (requested != nullptr) return requested;  // "" disables the database
  if (const char* env = std::getenv("GE2_TUNEDB"); env != nullptr) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return std::string(xdg) + "/ge2/tunedb.sqlite";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::string(home) + "/.cache/ge2/tunedb.sqlite";
  return "";
}

}  // namespace ge2
