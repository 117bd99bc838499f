// cuda_skinny: the library's instances of the kernels in skinny_gemm.cuh and
// skinny_mma.cuh, for decode-sized GEMMs (M <= kSkinnyMaxRows) on nn.Linear
// weights. One launch, no workspace, no library call: its host cost is a kernel
// launch.
#include <fmt/format.h>

#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/dtype_dispatch.cuh"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/skinny_mma.cuh"
#include "core/error.hpp"

namespace ge2::cuda {
namespace {

// Eight warps of two columns each, two vectors per column in flight per lane:
// the fastest of six configurations for one row on 7B-70B FFN weights, within
// 1-3% of the best on the rest (bench/skinny_probe.cu, run 11).
using LibraryConfig = skinny::Config<8, 2, 2>;
static_assert(LibraryConfig::kColumnsPerBlock == skinny_columns_per_block(1));
// The tensor-core form: eight warps splitting K, four steps in flight per warp,
// over 16 columns up to 8 rows and 32 above (skinny_columns_per_block). Of twelve
// configurations (bench/skinny_probe.cu, H100, runs 21 and 23) the first is the
// fastest or within 5% at 2-8 rows on 7B-70B FFN weights; at 16 rows the second
// is 5-18% faster than it where K >= 8192 or N >= 14336, 11% slower at 11008 x 4096.
using MmaLibraryConfig = skinny::MmaConfig<8, 2, 4>;
using MmaWideConfig = skinny::MmaConfig<8, 4, 4>;
static_assert(MmaLibraryConfig::kColumnsPerBlock ==
              skinny_columns_per_block(kSkinnyCudaCoreMaxRows));
static_assert(MmaWideConfig::kColumnsPerBlock == skinny_columns_per_block(kSkinnyMaxRows));
static_assert(kSkinnyMaxRows <= 16, "an m16n8k16 tile holds 16 rows");

// Calls f(Cfg{}, max_rows) with the tensor-core configuration that runs `rows` rows: the
// one place the launch and the configuration text take it from.
template <typename F>
decltype(auto) with_mma_config(std::int64_t rows, F&& f) {
  if (rows > kSkinnyCudaCoreMaxRows) return f(MmaWideConfig{}, kSkinnyMaxRows);
  return f(MmaLibraryConfig{}, kSkinnyCudaCoreMaxRows);
}

}  // namespace

std::string skinny_configuration(SkinnyForm form, std::int64_t rows) {
  if (form == SkinnyForm::TensorCores)
    return with_mma_config(rows, [](auto cfg, int max_rows) {
      using Cfg = decltype(cfg);
      return fmt::format(
          "tensor cores (mma.sync m16n8k16): {} warps splitting K over {} columns per block, {} "
          "steps of 32 in flight per warp, up to {} rows, fp32 accumulation",
          Cfg::kWarps, Cfg::kColumnsPerBlock, Cfg::kUnroll, max_rows);
    });
  return fmt::format(
      "{} warps of {} columns per block, {} vectors per column in flight, up to {} rows, fp32 "
      "accumulation",
      LibraryConfig::kWarps, LibraryConfig::kCols, LibraryConfig::kUnroll, kSkinnyCudaCoreMaxRows);
}

void launch_skinny_gemm(const GemmProblem& pr, const void* a, const void* b, const void* c,
                        const void* bias, void* d, SkinnyForm form, cudaStream_t stream) {
  // The selector admitted the problem (skinny_layout_problem); these restate its invariants.
  const MatrixView op_a = pr.op_a(), op_b = pr.op_b();
  require(pr.m >= 1 && pr.m <= kSkinnyMaxRows && op_a.col_stride == 1 && op_b.row_stride == 1 &&
              pr.d.col_stride == 1 && (!pr.has_c || pr.c.col_stride == 1) && pr.batch <= 65535,
          GE2_ERROR_INTERNAL, "cuda_skinny: GEMM {} is outside the kernel's layouts", pr);
  require(
      form == SkinnyForm::CudaCores ? pr.m <= kSkinnyCudaCoreMaxRows : dtype_size(pr.dtype) == 2,
      GE2_ERROR_INTERNAL, "cuda_skinny: GEMM {} is outside the {} form", pr,
      form == SkinnyForm::CudaCores ? "CUDA-core" : "tensor-core");
  skinny::Params p{};
  p.a = a;
  p.b = b;
  p.c = c;
  p.bias = bias;
  p.d = d;
  p.m = static_cast<int>(pr.m);
  p.n = static_cast<int>(pr.n);
  p.k = static_cast<int>(pr.k);
  p.lda = op_a.row_stride;
  p.ldb = op_b.col_stride;
  p.ldc = pr.has_c ? pr.c.row_stride : 0;
  p.ldd = pr.d.row_stride;
  p.a_batch = op_a.batch_stride;
  p.b_batch = op_b.batch_stride;
  p.c_batch = pr.has_c ? pr.c.batch_stride : 0;
  p.d_batch = pr.d.batch_stride;
  p.bias_stride = pr.bias_stride;
  p.alpha = pr.alpha;
  p.beta = pr.beta;
  p.act = static_cast<int>(pr.act);
  p.has_c = pr.has_c;
  p.has_bias = pr.has_bias;
  with_cuda_type(pr.dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    const int batch = static_cast<int>(pr.batch);
    if constexpr (sizeof(T) == 2) {
      if (form == SkinnyForm::TensorCores) {
        with_mma_config(
            p.m, [&](auto cfg, int) { skinny::launch_mma<T, decltype(cfg)>(p, batch, stream); });
        return;
      }
    }
    skinny::launch<T, LibraryConfig, kSkinnyCudaCoreMaxRows>(p, batch, stream);
  });
  GE2_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ge2::cuda
