// Whole-plan CUDA-graph replay (compile option graph_replay).
#pragma once

#include <memory>
#include <vector>

#include "backends/cuda/cuda_raii.hpp"
#include "exec/step.hpp"

namespace ge2::cuda {

// Records a plan's steps as a CUDA graph per step list and set of bound
// pointers (the kMaxEntries most recent), so that an execution whose pointers were seen before
// costs one cudaGraphLaunch instead of one cublasLtMatmul per step, whose host cost alone is 6-9 us
// on the H200's host (bench_gemm). Recording happens on a stream and with a workspace of the plan's
// own, so replays never share a workspace with eager work on the caller's stream.
class GraphReplayCache {
 public:
  explicit GraphReplayCache(std::size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {}

  // The executable graph for state.steps_id and state.slots, recorded now if they are new.
  cudaGraphExec_t get(const std::vector<std::unique_ptr<Step>>& steps, const ExecState& state);

 private:
  struct Entry {
    std::uint64_t steps_id = 0;
    std::vector<void*> slots;
    GraphExec exec;
  };
  // Eight pointer sets of a fixed plan; a dynamic plan's extents each take their own.
  static constexpr std::size_t kMaxEntries = 64;

  GraphExec record(const std::vector<std::unique_ptr<Step>>& steps, const ExecState& state);

  std::size_t workspace_bytes_;
  Stream stream_;
  DeviceBuffer workspace_;
  std::vector<Entry> entries_;  // least recently used first
};

}  // namespace ge2::cuda
