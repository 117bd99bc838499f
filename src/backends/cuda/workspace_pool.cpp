#include "backends/cuda/workspace_pool.hpp"

namespace ge2::cuda {

void* WorkspacePool::get(cudaStream_t stream, bool capturing) {
  std::lock_guard lock(mutex_);
  if (auto it = pinned_.find(stream); it != pinned_.end()) return it->second;
  auto it = buffers_.find(stream);
  if (it == buffers_.end()) {
    if (buffers_.size() >= kMaxStreams && !capturing) {
      // Callers that create and destroy many streams would grow this without
      // bound; wait for all work, then start over. (Not while capturing: a
      // synchronization would end the caller's capture.)
      GE2_CUDA_CHECK(cudaDeviceSynchronize());
      buffers_.clear();
    }
    // The first execution on a stream may be inside the caller's stream capture
    // (torch.cuda.graph, cudaStreamBeginCapture): allocating is not stream work,
    // so it is made in relaxed capture mode rather than refused.
    const RelaxedCaptureMode relaxed;
    it = buffers_.emplace(stream, DeviceBuffer(bytes_)).first;
  }
  void* workspace = it->second.data();
  if (capturing) {
    // The caller's graph now holds this address: the buffer moves where no
    // eviction frees it, and the stream keeps it.
    captured_.push_back(std::move(it->second));
    buffers_.erase(it);
    pinned_.emplace(stream, workspace);
  }
  return workspace;
}

std::size_t WorkspacePool::stream_count() const {
  std::lock_guard lock(mutex_);
  return buffers_.size();
}

std::size_t WorkspacePool::captured_count() const {
  std::lock_guard lock(mutex_);
  return captured_.size();
}

}  // namespace ge2::cuda
