// The host's physical memory, for refusing allocations up front: with
// overcommit a huge allocation can "succeed" and the process is killed later
// when the pages are touched.
#pragma once

#include <unistd.h>

#include <cstddef>

#include "core/error.hpp"

namespace ge2 {

// Physical memory of this host in bytes, or 0 when unknown.
inline double physical_memory_bytes() {
  const auto pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * page_size : 0.0;
}

// Throws GE2_ERROR_OUT_OF_MEMORY naming `what` (with its function) when `bytes`
// exceed physical memory.
inline void require_fits_in_host_memory(std::size_t bytes, const char* what) {
  const double physical = physical_memory_bytes();
  require(physical == 0.0 || static_cast<double>(bytes) <= physical, GE2_ERROR_OUT_OF_MEMORY,
          "{} of {} bytes exceed this host's {:.0f} bytes of physical memory", what, bytes,
          physical);
}

}  // namespace ge2
