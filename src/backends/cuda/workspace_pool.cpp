#include "backends/cuda/workspace_pool.hpp"

namespace ge2::cuda {

void* WorkspacePool::get(cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  if (auto it = buffers_.find(stream); it != buffers_.end()) return it->second.data();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  GE2_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (buffers_.size() >= kMaxStreams && capture == cudaStreamCaptureStatusNone) {
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
  return buffers_.emplace(stream, DeviceBuffer(bytes_)).first->second.data();
}

}  // namespace ge2::cuda
