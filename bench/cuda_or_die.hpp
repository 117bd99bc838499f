// The benchmarks' CUDA check: a failed runtime call ends the program with its
// name and CUDA's message (a benchmark has nothing to recover to).
#pragma once

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdlib>

#define CUDA_OR_DIE(call)                                                   \
  do {                                                                      \
    cudaError_t e_ = (call);                                                \
    if (e_ != cudaSuccess) {                                                \
      fmt::print(stderr, "{} failed: {}\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)
