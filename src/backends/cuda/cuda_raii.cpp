#include "backends/cuda/cuda_raii.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ge2::cuda {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    data_ = nullptr;
    check_cuda(status, fmt::format("cudaMalloc({} bytes)", bytes).c_str());
  }
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) (void)cudaFree(data_);
}

LtHandle make_lt_handle() {
  cublasLtHandle_t handle = nullptr;
  GE2_CUBLAS_CHECK(cublasLtCreate(&handle));
  return LtHandle(handle);
}

MatmulDesc make_matmul_desc(cublasComputeType_t compute, cudaDataType_t scale) {
  cublasLtMatmulDesc_t desc = nullptr;
  GE2_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, scale));
  return MatmulDesc(desc);
}

MatrixLayout make_layout(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols,
                         std::int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  GE2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  return MatrixLayout(layout);
}

MatmulPreference make_preference() {
  cublasLtMatmulPreference_t preference = nullptr;
  GE2_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  return MatmulPreference(preference);
}

Event make_event() {
  cudaEvent_t event = nullptr;
  GE2_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return Event(event);
}

Event make_timing_event() {
  cudaEvent_t event = nullptr;
  GE2_CUDA_CHECK(cudaEventCreate(&event));
  return Event(event);
}

Stream make_nonblocking_stream() {
  cudaStream_t stream = nullptr;
  GE2_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream(stream);
}

}  // namespace ge2::cuda
