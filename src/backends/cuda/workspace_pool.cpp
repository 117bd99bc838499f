#include "backends/cuda/workspace_pool.hpp"

#include "core/error.hpp"

namespace ge2::cuda {
namespace {

// What a captured graph's user object carries to its destructor.
struct GraphRelease {
  std::shared_ptr<WorkspacePool::Released> released;
  WorkspacePool::CaptureKey key;
};

// Runs on a CUDA-internal thread once the graph and its executable graphs are
// destroyed and their launches done; it may not call CUDA, so it only hands the
// key back.
void CUDART_CB on_graph_destroyed(void* data) {
  const std::unique_ptr<GraphRelease> release(static_cast<GraphRelease*>(data));
  const std::lock_guard lock(release->released->mutex);
  release->released->keys.push_back(release->key);
}

}  // namespace

WorkspacePool::WorkspacePool(std::size_t bytes)
    : bytes_(bytes), released_(std::make_shared<Released>()) {}

void* WorkspacePool::for_stream(cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  free_released();
  auto it = buffers_.find(stream);
  if (it == buffers_.end()) {
    if (buffers_.size() >= kMaxStreams) {
      // Callers that create and destroy many streams would grow this without
      // bound; wait for all work, then start over.
      GE2_CUDA_CHECK(cudaDeviceSynchronize());
      buffers_.clear();
    }
    it = buffers_.emplace(stream, DeviceBuffer(bytes_)).first;
  }
  return it->second.data();
}

void* WorkspacePool::for_capture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  GE2_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id, &graph));
  require(status == cudaStreamCaptureStatusActive && graph != nullptr, GE2_ERROR_CUDA,
          "ge2_plan_execute: the stream's capture is no longer active (status {}); an earlier "
          "call invalidated it",
          static_cast<int>(status));
  const CaptureKey key{id, stream};
  std::lock_guard lock(mutex_);
  if (auto it = captured_.find(key); it != captured_.end()) return it->second.data();
  // Neither allocating nor creating a user object is stream work: allowed in the
  // caller's capture, whatever its mode.
  const RelaxedCaptureMode relaxed;
  DeviceBuffer buffer(bytes_);
  auto release = std::make_unique<GraphRelease>(GraphRelease{released_, key});
  cudaUserObject_t object = nullptr;
  GE2_CUDA_CHECK(cudaUserObjectCreate(&object, release.get(), on_graph_destroyed, 1,
                                      cudaUserObjectNoDestructorSync));
  // From here the user object owns `release`; moving the one reference into the
  // graph makes the graph's end its end.
  static_cast<void>(release.release());
  const cudaError_t retained = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
  if (retained != cudaSuccess) {
    (void)cudaUserObjectRelease(object, 1);  // runs the destructor: the key is handed back
    check_cuda(retained, "cudaGraphRetainUserObject");
  }
  void* data = buffer.data();
  captured_.emplace(key, std::move(buffer));
  return data;
}

void WorkspacePool::free_released() {
  std::vector<CaptureKey> keys;
  {
    const std::lock_guard lock(released_->mutex);
    keys.swap(released_->keys);
  }
  if (keys.empty()) return;
  // cudaFree is not stream work, but another thread may be capturing.
  const RelaxedCaptureMode relaxed;
  for (const CaptureKey& key : keys) captured_.erase(key);
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
