// Whole-plan CUDA-graph replay (compile option graph_replay).
#pragma once

#include <memory>
#include <vector>

#include "backends/cuda/cuda_raii.hpp"
#include "exec/step.hpp"

namespace ge2::cuda {

// Records a plan's steps as a CUDA graph per set of bound pointers (the eight
// most recent), so that an execution whose pointers were seen before costs one
// cudaGraphLaunch instead of one cublasLtMatmul per step, whose host cost alone
// is 6-9 us on the H200's host (bench_gemm). Recording happens on a stream and
// with a workspace of the plan's own, so replays never share a workspace with
// eager work on the caller's stream.
class GraphReplayCache {
 public:
  explicit GraphReplayCache(std::size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {}

  // The executable graph for state.slots, recorded now if they are new.
  cudaGraphExec_t get(const std::vector<std::unique_ptr<Step>>& steps, const ExecState& state);

 private:
  struct Entry {
    std::vector<void*> slots;
    GraphExec exec;
  };
  static constexpr std::size_t kMaxEntries = 8;

  GraphExec record(const std::vector<std::unique_ptr<Step>>& steps, const ExecState& state);

  std::size_t workspace_bytes_;
  Stream stream_;
  DeviceBuffer workspace_;
  std::vector<Entry> entries_;  // least recently used first
};

}  // namespace ge2::cuda
