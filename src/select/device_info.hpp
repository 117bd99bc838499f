// What the selector knows about the device. Tests build synthetic ones so that
// every rule is covered without a GPU.
#pragma once

#include <cstddef>
#include <string>

namespace ge2 {

struct DeviceInfo {
  bool has_cuda = false;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::string name = "cpu";
  std::size_t cublaslt_version = 0;
  double memory_bandwidth_gbs = 0;  // measured or nominal device-memory bandwidth

  int compute_capability() const { return cc_major * 10 + cc_minor; }
};

// An H200 as measured on the device machine (see docs/selector.md).
DeviceInfo synthetic_h200();

}  // namespace ge2
