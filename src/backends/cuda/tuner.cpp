#include "backends/cuda/tuner.hpp"

#include <algorithm>
#include <optional>

#include "backends/cuda/kernels.hpp"
#include "backends/cuda/timing_rig.hpp"
#include "core/error.hpp"

namespace ge2::cuda {

Tuner::Tuner(cublasLtHandle_t handle, std::size_t max_workspace_bytes, int l2_bytes)
    : handle_(handle), max_workspace_(max_workspace_bytes), l2_bytes_(l2_bytes) {}

TuneOutcome Tuner::tune(LtMatmul& matmul) {
  const GemmProblem& p = matmul.problem();
  TimingRig rig(p, l2_bytes_, max_workspace_);
  // A step is the matmul and, where cuBLASLt lacks the activation, its pass
  // over D: times compare with other families' fused kernels.
  const std::optional<ElementwiseProblem> pass =
      matmul.needs_separate_activation() ? std::optional(matmul.activation_pass()) : std::nullopt;
  auto run = [&](const cublasLtMatmulAlgo_t& algo, int set, void* d) {
    matmul.run(algo, rig.pointers(set, d), rig.workspace(), max_workspace_, rig.stream());
    if (pass) launch_elementwise(*pass, d, nullptr, d, rig.stream());
  };

  const auto heuristic = matmul.heuristic(1, max_workspace_, 16);
  require(!heuristic.empty(), GE2_ERROR_CUBLAS, "tuner: cuBLASLt offers no algorithm for GEMM {}",
          p.shape_string());
  TuneOutcome outcome;
  const cublasLtMatmulAlgo_t baseline = heuristic.front().algo;
  rig.clear(rig.reference());
  run(baseline, 0, rig.reference());
  outcome.heuristic_time_us = rig.median_us([&](int set) { run(baseline, set, rig.output()); });
  outcome.best = {baseline, read_algo_config(baseline), heuristic.front().workspaceSize,
                  outcome.heuristic_time_us};

  // Candidates: the heuristic's list under several workspace limits, without repeats.
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  for (std::size_t limit : {max_workspace_, std::size_t{4} << 20, std::size_t{0}}) {
    for (const auto& r : matmul.heuristic(32, limit, 16)) {
      const AlgoConfig config = read_algo_config(r.algo);
      const bool seen = std::any_of(candidates.begin(), candidates.end(), [&](const auto& c) {
        return read_algo_config(c.algo) == config;
      });
      if (!seen) candidates.push_back(r);
    }
  }
  const double bound = agreement_bound(p.dtype, matmul.kernel() == KernelId::LtTf32);
  for (const auto& candidate : candidates) {
    ++outcome.candidates;
    rig.clear(rig.output());
    run(candidate.algo, 0, rig.output());
    const double difference = rig.difference_from_reference();
    if (!(difference <= bound)) {
      ++outcome.rejected;
      continue;
    }
    const double time = rig.median_us([&](int set) { run(candidate.algo, set, rig.output()); });
    if (time < outcome.best.time_us)
      outcome.best = {candidate.algo, read_algo_config(candidate.algo), candidate.workspaceSize,
                      time};
  }
  outcome.fallback_time_us = rig.median_us([&](int set) {
    const LtPointers r = rig.pointers(set, rig.output());
    launch_fallback_gemm(p, r.a, r.b, r.c, r.bias, r.d, rig.stream());
  });
  return outcome;
}

}  // namespace ge2::cuda
