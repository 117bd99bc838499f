// Row-wise FP8 e4m3 quantization of a 16-bit matrix for lt_fp8_e4m3 (the
// kernels: fp8_quantize_rows.cuh). One block per row (grid-stride over the rows)
// finds the row's amax and converts the row with its own scale: rows up to 16384
// elements from registers, longer or strided ones reading the row again from the
// cache the first read filled. One pass over memory, no atomics, no host
// synchronization (capturable). The host formula (core/dtype.hpp, cpu_fp8_ref)
// is the same arithmetic. The per-group form (fp8_quantize_groups.cuh) scales each
// row's 128-column groups apart, for cuBLASLt's block-scale mode.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/dtype_dispatch.cuh"
#include "backends/cuda/fp8_quantize_groups.cuh"
#include "backends/cuda/fp8_quantize_rows.cuh"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/launch_geometry.cuh"

namespace ge2::cuda {
namespace {

// What both quantizers read: src's view, and whether its rows load as 16-byte words
// and the dense copy's take 8-byte stores (the copy's rows start every `cols` bytes:
// cols % 8 == 0).
struct QuantizeSource {
  quantize::View view;
  bool vectorized;
};
QuantizeSource quantize_source(DType dtype, const MatrixView& src, const void* src_data,
                               const std::uint8_t* dst) {
  require(dtype != DType::F32, GE2_ERROR_INTERNAL, "e4m3 quantization takes f16 or bf16");
  return {{src.rows, src.cols, src.row_stride, src.col_stride},
          src.col_stride == 1 && src.cols % quantize::kVector == 0 &&
              src.row_stride % quantize::kVector == 0 && misalignment_bytes(src_data) == 0 &&
              misalignment_bytes(dst) % 8 == 0};
}

}  // namespace

void launch_quantize_e4m3_rows(DType dtype, const MatrixView& src, const void* src_data,
                               std::uint8_t* dst, float* row_scales, int sm_count,
                               cudaStream_t stream, Activation act) {
  const QuantizeSource source = quantize_source(dtype, src, src_data, dst);
  const auto blocks =
      static_cast<unsigned>(std::clamp<long long>(src.rows, 1, 16LL * std::max(1, sm_count)));
  with_cuda_type(dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    if constexpr (!std::is_same_v<T, float>) {
      const auto* typed = static_cast<const T*>(src_data);
      auto* out = reinterpret_cast<__nv_fp8_storage_t*>(dst);
      if (source.vectorized && src.cols <= quantize::kLibraryShortRowsMaxCols) {
        visit_activation(act, [&](auto functor) {
          using Act = decltype(functor);
          using Cfg = quantize::LibraryShortRows<Act>;
          GE2_CUDA_CHECK(launch_dependent(true, quantize::short_rows_kernel<T, Cfg, Act>,
                                          dim3(blocks), dim3(Cfg::kThreads), 0, stream, typed,
                                          source.view, out, row_scales, functor));
        });
        return;
      }
      auto kernel =
          source.vectorized ? quantize::rows_kernel<T, true> : quantize::rows_kernel<T, false>;
      GE2_CUDA_CHECK(launch_dependent(true, kernel, dim3(blocks), dim3(quantize::kRowThreads), 0,
                                      stream, typed, source.view, out, row_scales,
                                      quantize::RuntimeActivation{static_cast<int>(act)}));
    }
  });
}

void launch_quantize_e4m3_groups(DType dtype, const MatrixView& src, const void* src_data,
                                 std::uint8_t* dst, float* scales, std::int64_t scale_ld,
                                 int sm_count, cudaStream_t stream, Activation act) {
  const QuantizeSource source = quantize_source(dtype, src, src_data, dst);
  constexpr int groups_per_block = quantize::kGroupThreads / quantize::kGroupLanes;
  const long long groups = src.rows * ((src.cols + kFp8ScaleBlock - 1) / kFp8ScaleBlock);
  const auto blocks = static_cast<unsigned>(std::clamp<long long>(
      (groups + groups_per_block - 1) / groups_per_block, 1, 16LL * std::max(1, sm_count)));
  with_cuda_type(dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    if constexpr (!std::is_same_v<T, float>) {
      const auto* typed = static_cast<const T*>(src_data);
      auto* out = reinterpret_cast<__nv_fp8_storage_t*>(dst);
      if (source.vectorized) {
        visit_activation(act, [&](auto functor) {
          GE2_CUDA_CHECK(launch_dependent(true, quantize::groups_kernel<T, true, decltype(functor)>,
                                          dim3(blocks), dim3(quantize::kGroupThreads), 0, stream,
                                          typed, source.view, out, scales,
                                          static_cast<long long>(scale_ld), functor));
        });
        return;
      }
      GE2_CUDA_CHECK(launch_dependent(
          true, quantize::groups_kernel<T, false, quantize::RuntimeActivation>, dim3(blocks),
          dim3(quantize::kGroupThreads), 0, stream, typed, source.view, out, scales,
          static_cast<long long>(scale_ld), quantize::RuntimeActivation{static_cast<int>(act)}));
    }
  });
}

}  // namespace ge2::cuda
