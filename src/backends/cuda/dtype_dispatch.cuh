// The CUDA side of the dtype table: each ge2 dtype's device type and cuBLASLt
// data type, and one dispatch that every typed kernel launch goes through.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace ge2::cuda {

template <DType kDType>
struct CudaType;
template <>
struct CudaType<DType::F16> {
  using type = __half;
  static constexpr cudaDataType_t data_type = CUDA_R_16F;
};
template <>
struct CudaType<DType::BF16> {
  using type = __nv_bfloat16;
  static constexpr cudaDataType_t data_type = CUDA_R_16BF;
};
template <>
struct CudaType<DType::F32> {
  using type = float;
  static constexpr cudaDataType_t data_type = CUDA_R_32F;
};

// Calls f(CudaType<dtype>{}): the one switch from a dtype to its CUDA row, so
// f's body is instantiated once per row (`typename decltype(row)::type`).
template <typename F>
decltype(auto) with_cuda_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F16:
      return f(CudaType<DType::F16>{});
    case DType::BF16:
      return f(CudaType<DType::BF16>{});
    case DType::F32:
      return f(CudaType<DType::F32>{});
    case DType::F8E4M3:  // storage only: no value is computed in it
      break;
  }
  fail(GE2_ERROR_INTERNAL, "no CUDA type for dtype {}", static_cast<int>(dtype));
}

inline cudaDataType_t cuda_data_type(DType dtype) {
  return with_cuda_type(dtype, [](auto row) { return decltype(row)::data_type; });
}

}  // namespace ge2::cuda
