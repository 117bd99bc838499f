#include "tunedb/tunedb_path.hpp"

#include <cstdlib>
#include <fstream>
#include <string>

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

unsigned new_file_mode() {
  unsigned mask = 022;  // the usual default, if /proc is not there
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Umask:", 0) == 0)
      mask = static_cast<unsigned>(std::stoul(line.substr(6), nullptr, 8));
  return 0666u & ~mask;
}

}  // namespace ge2
