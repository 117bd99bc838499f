// cuBLASLt / CUTLASS workspaces. Eager executions: one per stream, since work on
// one stream is ordered, so plans sharing a stream may share its workspace and
// different streams never do. Executions captured into the caller's CUDA graph:
// one per capture sequence and stream, owned by that graph, because a graph may
// be replayed on any stream, concurrently with other graphs and with eager work.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_raii.hpp"

namespace ge2::cuda {

class WorkspacePool {
 public:
  explicit WorkspacePool(std::size_t bytes);
  std::size_t bytes() const { return bytes_; }
  // The workspace of `stream` for executions that run now, allocated on its first
  // use (the only cudaMalloc an eager execution makes; later ones on the stream
  // reuse it). Freed when more than 64 streams have been seen. Also frees the
  // workspaces of captured graphs the caller has destroyed since the last call.
  void* for_stream(cudaStream_t stream);
  // A workspace for an execution being captured on `stream` (its capture must be
  // active): one per capture sequence and stream, so two graphs captured one after
  // the other on the same stream (torch.cuda.graph's shared capture stream) never
  // share one. It is allocated in relaxed capture mode (allocating is not stream
  // work) and lives as long as the caller's graph and every executable graph made
  // from it: the graph retains a CUDA user object whose destructor hands the
  // workspace back, and a later for_stream call frees it (a destructor callback
  // may not call CUDA). The pool itself (the backend's, which the context and
  // every plan hold) frees what is left when the last of them goes.
  void* for_capture(cudaStream_t stream);
  // For ge2_context_describe: eager workspaces since the last eviction, and those
  // held for captured graphs not yet destroyed.
  std::size_t stream_count() const;
  std::size_t captured_count() const;

  // Capture sequence id (unique over the process's life) and stream.
  using CaptureKey = std::pair<unsigned long long, cudaStream_t>;
  // Keys of graphs destroyed by the caller; shared with the user objects'
  // destructors, which may run after the pool is gone.
  struct Released {
    std::mutex mutex;
    std::vector<CaptureKey> keys;
  };

 private:
  void free_released();  // with mutex_ held

  static constexpr std::size_t kMaxStreams = 64;
  std::size_t bytes_;
  mutable std::mutex mutex_;
  std::map<cudaStream_t, DeviceBuffer> buffers_;
  std::map<CaptureKey, DeviceBuffer> captured_;
  std::shared_ptr<Released> released_;
};

}  // namespace ge2::cuda
