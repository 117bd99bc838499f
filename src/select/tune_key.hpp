// Encodes a GEMM problem as the tuning database's key.
#pragma once

#include "ir/kernel_problems.hpp"
#include "select/device_info.hpp"
#include "select/kernel_id.hpp"
#include "tunedb/tune_record.hpp"

namespace ge2 {

std::string device_key(const DeviceInfo& device);
TuneKey make_tune_key(const GemmProblem& problem, KernelId kernel, const DeviceInfo& device);

}  // namespace ge2
