// Checked CUDA / cuBLASLt calls: a failure becomes ge2::Error with the call and
// the library's own status string (cudaGetErrorString, cublasLtGetStatusName).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace ge2 {

void check_cuda(cudaError_t status, const char* call);
void check_cublas(cublasStatus_t status, const char* call);

}  // namespace ge2

#define GE2_CUDA_CHECK(call) ::ge2::check_cuda((call), #call)
#define GE2_CUBLAS_CHECK(call) ::ge2::check_cublas((call), #call)
