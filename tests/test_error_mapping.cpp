// How failures become statuses at the C boundary: CUDA and cuBLASLt status
// strings, allocation failures, and unexpected exceptions (GE2_ERROR_INTERNAL).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "api/api_guard.hpp"

#ifdef GE2_WITH_CUDA
#include "backends/cuda/cuda_errors.hpp"
#endif

using namespace ge2;

TEST_CASE("guarded: ge2::Error keeps its status and gains the function name") {
  const ge2_status_t status = guarded(
      "ge2_example", [](const char*) { fail(GE2_ERROR_SHAPE_MISMATCH, "argument 'b': K=3"); });
  CHECK(status == GE2_ERROR_SHAPE_MISMATCH);
  CHECK(std::string(last_error()) == "ge2_example: argument 'b': K=3");
}

TEST_CASE("guarded: bad_alloc is GE2_ERROR_OUT_OF_MEMORY, other exceptions GE2_ERROR_INTERNAL") {
  CHECK(guarded("ge2_example", [](const char*) { throw std::bad_alloc(); }) ==
        GE2_ERROR_OUT_OF_MEMORY);
  CHECK(std::string(last_error()).find("out of host memory") != std::string::npos);
  CHECK(guarded("ge2_example", [](const char*) { throw std::logic_error("invariant broken"); }) ==
        GE2_ERROR_INTERNAL);
  CHECK(std::string(last_error()) == "ge2_example: internal error: invariant broken");
  CHECK(guarded("ge2_example", [](const char*) { throw 42; }) == GE2_ERROR_INTERNAL);
  CHECK(guarded("ge2_example", [](const char*) {}) == GE2_OK);
}

#ifdef GE2_WITH_CUDA
TEST_CASE("CUDA and cuBLASLt failures carry the library's status names") {
  try {
    check_cuda(cudaErrorInvalidValue, "cudaMemcpyAsync(...)");
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.status() == GE2_ERROR_CUDA);
    CHECK(std::string(e.what()).find("cudaMemcpyAsync(...) failed: cudaErrorInvalidValue") !=
          std::string::npos);
  }
  try {
    check_cuda(cudaErrorMemoryAllocation, "cudaMalloc(8 bytes)");
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.status() == GE2_ERROR_OUT_OF_MEMORY);
  }
  try {
    check_cublas(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul(...)");
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.status() == GE2_ERROR_CUBLAS);
    CHECK(std::string(e.what()).find("CUBLAS_STATUS_NOT_SUPPORTED") != std::string::npos);
  }
}
#endif
