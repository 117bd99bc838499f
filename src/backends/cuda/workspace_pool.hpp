// One cuBLASLt workspace per stream: work on one stream is ordered, so plans
// sharing a stream may share its workspace; different streams never do.
#pragma once

#include <map>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_raii.hpp"

namespace ge2::cuda {

class WorkspacePool {
 public:
  explicit WorkspacePool(std::size_t bytes) : bytes_(bytes) {}
  std::size_t bytes() const { return bytes_; }
  // The workspace of `stream`, allocated on its first use (the only cudaMalloc
  // an execution can make; later executions on the stream reuse it), also when
  // that first use is being captured into the caller's CUDA graph. `capturing`:
  // the stream is being captured now. A graph captured on a stream keeps the
  // workspace's address, so a workspace used in a capture is kept for the pool's
  // life; the others are freed when more than 64 streams have been seen.
  void* get(cudaStream_t stream, bool capturing);
  // For ge2_context_describe: workspaces of streams seen since the last eviction,
  // and those kept for captured graphs.
  std::size_t stream_count() const;
  std::size_t captured_count() const;

 private:
  static constexpr std::size_t kMaxStreams = 64;
  std::size_t bytes_;
  mutable std::mutex mutex_;
  std::map<cudaStream_t, DeviceBuffer> buffers_;
  // Workspaces a captured graph may read: never freed before the pool.
  std::vector<DeviceBuffer> captured_;
  std::map<cudaStream_t, void*> pinned_;  // stream -> its workspace in captured_
};

}  // namespace ge2::cuda
