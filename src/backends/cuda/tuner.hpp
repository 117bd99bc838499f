// Measures cuBLASLt algorithms for one problem: heuristic candidates over
// several workspace limits, each checked against the heuristic's first choice
// and timed with CUDA events on rotating random inputs larger than L2.
#pragma once

#include <vector>

#include "backends/cuda/algo_config.hpp"
#include "backends/cuda/lt_matmul.hpp"

namespace ge2::cuda {

struct TimedAlgo {
  cublasLtMatmulAlgo_t algo{};
  AlgoConfig config;
  std::size_t workspace_bytes = 0;
  double time_us = 0;  // median
};

struct TuneOutcome {
  TimedAlgo best;
  double heuristic_time_us = 0;  // cuBLASLt's first choice, same data, same run
  double fallback_time_us = 0;   // cuda_f32 on the same problem, for the selector
  int candidates = 0;
  int rejected = 0;  // produced a different result than the heuristic's choice
};

class Tuner {
 public:
  Tuner(cublasLtHandle_t handle, std::size_t max_workspace_bytes, int l2_bytes);
  TuneOutcome tune(LtMatmul& matmul);

 private:
  cublasLtHandle_t handle_;
  std::size_t max_workspace_;
  int l2_bytes_;
};

}  // namespace ge2::cuda
