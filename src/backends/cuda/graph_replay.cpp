#include "backends/cuda/graph_replay.hpp"

#include <algorithm>

namespace ge2::cuda {

cudaGraphExec_t GraphReplayCache::get(const std::vector<std::unique_ptr<Step>>& steps,
                                      const ExecState& state) {
  auto hit = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.steps_id == state.steps_id && e.slots == state.slots;
  });
  if (hit != entries_.end()) {
    std::rotate(hit, hit + 1, entries_.end());  // now the most recently used
    return entries_.back().exec.get();
  }
  GraphExec exec = record(steps, state);
  if (entries_.size() == kMaxEntries) entries_.erase(entries_.begin());
  entries_.push_back({state.steps_id, state.slots, std::move(exec)});
  return entries_.back().exec.get();
}

GraphExec GraphReplayCache::record(const std::vector<std::unique_ptr<Step>>& steps,
                                   const ExecState& state) {
  // Allocations happen before the capture: nothing may allocate inside it.
  if (!stream_) stream_ = make_nonblocking_stream();
  if (workspace_.data() == nullptr) workspace_ = DeviceBuffer(workspace_bytes_);
  ExecState local;
  local.slots = state.slots;
  local.stream = stream_.get();
  local.workspace = workspace_.data();
  local.workspace_bytes = workspace_bytes_;
  GE2_CUDA_CHECK(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal));
  try {
    for (const auto& step : steps) step->run(local);
  } catch (...) {
    // End the capture so that the stream stays usable, then report the step's error.
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(stream_.get(), &broken);
    if (broken != nullptr) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    throw;
  }
  cudaGraph_t raw = nullptr;
  GE2_CUDA_CHECK(cudaStreamEndCapture(stream_.get(), &raw));
  const Graph graph(raw);
  cudaGraphExec_t exec = nullptr;
  GE2_CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
  return GraphExec(exec);
}

}  // namespace ge2::cuda
