#include "backends/cuda/cuda_errors.hpp"

#include "core/error.hpp"

namespace ge2 {

void check_cuda(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  const ge2_status_t code =
      status == cudaErrorMemoryAllocation ? GE2_ERROR_OUT_OF_MEMORY : GE2_ERROR_CUDA;
  // Clear the error so that a later cudaGetLastError() does not report it again
  // (non-sticky errors such as a failed allocation leave the context usable).
  (void)cudaGetLastError();
  fail(code, "{} failed: {} ({})", call, cudaGetErrorName(status), cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const ge2_status_t code =
      status == CUBLAS_STATUS_ALLOC_FAILED ? GE2_ERROR_OUT_OF_MEMORY : GE2_ERROR_CUBLAS;
  fail(code, "{} failed: {} ({})", call, cublasLtGetStatusName(status),
       cublasLtGetStatusString(status));
}

}  // namespace ge2
