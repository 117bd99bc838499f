#include "backends/cuda/workspace_pool.hpp"

namespace ge2::cuda {

void* WorkspacePool::get(cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  if (auto it = buffers_.find(stream); it != buffers_.end()) return it->second.data();
  if (buffers_.size() >= kMaxStreams) {
    // Callers that create and destroy many streams would grow this without
    // bound; wait for all work, then start over.
    GE2_CUDA_CHECK(cudaDeviceSynchronize());
    buffers_.clear();
  }
  return buffers_.emplace(stream, DeviceBuffer(bytes_)).first->second.data();
}

}  // namespace ge2::cuda
