// RAII owners for every CUDA and cuBLASLt handle ge2 creates.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cuda/cuda_errors.hpp"

namespace ge2::cuda {

template <typename T, auto Destroy>
struct HandleDeleter {
  void operator()(T handle) const { (void)Destroy(handle); }
};

template <typename Pointee, auto Destroy>
using UniqueHandle = std::unique_ptr<Pointee, HandleDeleter<Pointee*, Destroy>>;

using LtHandle = UniqueHandle<cublasLtContext, cublasLtDestroy>;
using MatmulDesc = UniqueHandle<cublasLtMatmulDescOpaque_t, cublasLtMatmulDescDestroy>;
using MatrixLayout = UniqueHandle<cublasLtMatrixLayoutOpaque_t, cublasLtMatrixLayoutDestroy>;
using MatmulPreference =
    UniqueHandle<cublasLtMatmulPreferenceOpaque_t, cublasLtMatmulPreferenceDestroy>;
using Event = UniqueHandle<CUevent_st, cudaEventDestroy>;
using Stream = UniqueHandle<CUstream_st, cudaStreamDestroy>;
using Graph = UniqueHandle<CUgraph_st, cudaGraphDestroy>;
using GraphExec = UniqueHandle<CUgraphExec_st, cudaGraphExecDestroy>;

// While alive, this thread may make calls that a stream capture in the global
// mode forbids (cudaMalloc): for allocations that are not stream work, made while
// the caller captures a plan's execution into a CUDA graph.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// The calling thread's current device is `ordinal` while alive and what it was
// before afterwards: ge2 works on its context's device without changing the
// caller's (a library call that moved it would send the caller's next
// allocation to another GPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal) : ordinal_(ordinal) {
    GE2_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != ordinal_) GE2_CUDA_CHECK(cudaSetDevice(ordinal_));
  }
  ~DeviceGuard() {
    if (previous_ != ordinal_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int ordinal_;
  int previous_ = 0;
};

// Device memory from cudaMalloc, freed with cudaFree.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

LtHandle make_lt_handle();
MatmulDesc make_matmul_desc(cublasComputeType_t compute, cudaDataType_t scale);
MatrixLayout make_layout(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols,
                         std::int64_t ld);
MatmulPreference make_preference();
Event make_event();         // for ordering only (timing disabled)
Event make_timing_event();  // for cudaEventElapsedTime
Stream make_nonblocking_stream();

}  // namespace ge2::cuda
