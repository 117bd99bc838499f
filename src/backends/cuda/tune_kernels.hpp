// Device helpers for the tuner: random operands and on-device comparison.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace ge2::cuda {

// Fills `count` elements with uniform values in [-1, 1) from a counter-based hash.
void fill_uniform(void* data, DType dtype, std::int64_t count, std::uint64_t seed,
                  cudaStream_t stream);

// ||x - ref|| / ||ref|| over `count` contiguous elements; synchronises `stream`.
double relative_difference(const void* x, const void* ref, DType dtype, std::int64_t count,
                           cudaStream_t stream);

}  // namespace ge2::cuda
