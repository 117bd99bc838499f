// Measures cuBLASLt algorithms for one problem: heuristic candidates over
// several workspace limits, each checked against the heuristic's first choice
// and timed with CUDA events on rotating random inputs larger than L2, together
// with the kernels of ge2's own families that can run the problem.
#pragma once

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cuda/algo_config.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "backends/cuda/timing_rig.hpp"

namespace ge2::cuda {

struct TimedAlgo {
  cublasLtMatmulAlgo_t algo{};
  AlgoConfig config;
  std::size_t workspace_bytes = 0;
  double time_us = 0;  // median
};

// A kernel of another family timed beside cuBLASLt's candidates on the same rig
// (checked against the rig's reference by whoever made it).
struct RivalKernel {
  KernelId kernel;
  bool gated;  // runs the gated unit (its epilogue), not the plain GEMM
  Contender run;
  nlohmann::json config;  // what its tuning database row stores
};
// Makes the rivals of a problem once the rig holds its operands and reference
// (the heuristic algorithm's output); their times come back in TuneOutcome.
using RivalSource = std::function<std::vector<RivalKernel>(TimingRig& rig)>;

struct TimedRival {
  KernelId kernel;
  bool gated;
  nlohmann::json config;
  double time_us = 0;  // median
};

struct TuneOutcome {
  TimedAlgo best;
  double heuristic_time_us = 0;  // cuBLASLt's first choice, same data, same run
  double fallback_time_us = 0;   // cuda_f32 on the same problem, for the selector
  int candidates = 0;
  int rejected = 0;  // produced a different result than the heuristic's choice
  std::vector<TimedRival> rivals;
  // Long problems whose fastest candidate was not the heuristic's first choice:
  // both timed alone (TimingRig::median_us), the candidate's time first. The
  // candidate is kept only where it is faster alone too; else `best` is the
  // heuristic's first choice with its interleaved time.
  std::optional<std::pair<double, double>> alone_us;
};

class Tuner {
 public:
  // sm_count: the device's, for the separate activation pass's launch.
  Tuner(cublasLtHandle_t handle, std::size_t max_workspace_bytes, int l2_bytes, int sm_count);
  // The heuristic's first choice, every other candidate that agrees with it and
  // the rivals, timed interleaved (TimingRig::interleaved_medians_us); for long
  // problems the winner checked alone against the heuristic's choice.
  TuneOutcome tune(LtMatmul& matmul, const RivalSource& rivals = {});

 private:
  cublasLtHandle_t handle_;
  std::size_t max_workspace_;
  int l2_bytes_;
  int sm_count_;
};

}  // namespace ge2::cuda
