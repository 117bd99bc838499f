// cuda_skinny: the library's instances of the kernels in skinny_gemm.cuh and
// skinny_mma.cuh, for decode-sized GEMMs (M <= kSkinnyMaxRows) on nn.Linear
// weights. One launch, no library call: its host cost is a kernel launch (and a
// memset of the tile counters where K is split over blocks).
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
static_assert(LibraryConfig::kColumnsPerBlock == kSkinnyColumnsPerBlock);
// The tensor-core form, 2-16 rows: eight warps splitting K over 16 columns per
// block, four steps in flight per warp; the fastest of twelve configurations or
// within 5% at 2-8 rows on 7B-70B FFN weights (bench/skinny_probe.cu, H100, runs 21
// and 23), and at 16 rows faster than blocks of 32 columns on 13 of 15 weights (run 24).
using MmaLibraryConfig = skinny::MmaConfig<8, 2, 4>;
static_assert(MmaLibraryConfig::kColumnsPerBlock == kSkinnyColumnsPerBlock);
static_assert(kSkinnyMaxRows <= 16, "an m16n8k16 tile holds 16 rows");
// The same on an e4m3 B (cuda_skinny_fp8w), whose lanes hold 16 k each and so twice
// the A vectors: A loaded beside its instructions, two blocks per SM asked of ptxas.
// Run 30 (H100, GELU-erf block 4096/11008, ABBA over four forms): 42.1 us at 16
// tokens against 50.3-51.3 with A loaded beside B; 1-1.7% slower at 1 and 8 tokens;
// three blocks per SM spilled and ran 5-70% slower.
using MmaE4m3Config = skinny::MmaConfig<8, 2, 4, false, 2, true>;
static_assert(MmaE4m3Config::kColumnsPerBlock == kSkinnyColumnsPerBlock);
// The selector's rule on blocks of scales restates the kernel's step and tile.
static_assert(4 * skinny::BRow<__half, __nv_fp8_storage_t>::kLaneK == kSkinnyFp8StepK);

// The workspace of a split launch: fp32 partial sums, then the tile counters.
struct SplitWorkspace {
  std::size_t counters_offset, bytes;
};
SplitWorkspace split_workspace(const GemmProblem& pr, int k_splits) {
  const auto tiles = static_cast<std::size_t>(skinny_column_tiles(pr.n));
  const std::size_t partial = sizeof(float) * static_cast<std::size_t>(k_splits) *
                              static_cast<std::size_t>(pr.m) * static_cast<std::size_t>(pr.n);
  const std::size_t offset = (partial + 255) / 256 * 256;
  return {offset, offset + sizeof(unsigned) * tiles};
}

}  // namespace

int skinny_tensor_core_blocks_per_sm(DType dtype, bool e4m3_weight) {
  int blocks = 0;
  with_cuda_type(dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    if constexpr (sizeof(T) == 2) {
      if (e4m3_weight)
        GE2_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &blocks, skinny::mma_kernel<T, 8, MmaE4m3Config, __nv_fp8_storage_t>,
            32 * MmaE4m3Config::kWarps, 0));
      else
        GE2_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &blocks, skinny::mma_kernel<T, 8, MmaLibraryConfig>, 32 * MmaLibraryConfig::kWarps, 0));
    }
  });
  return blocks;
}

std::size_t skinny_workspace_bytes(const GemmProblem& problem, const SkinnyLaunch& launch) {
  return launch.k_splits > 1 ? split_workspace(problem, launch.k_splits).bytes : 0;
}

std::string skinny_configuration(const SkinnyLaunch& launch, bool e4m3_weight) {
  auto split = [&] {
    return launch.k_splits > 1
               ? fmt::format(", K split over {} blocks per column tile (fp32 partial sums)",
                             launch.k_splits)
               : std::string();
  };
  if (e4m3_weight)
    return fmt::format(
        "tensor cores (mma.sync m16n8k16) on an e4m3 B widened to the 16-bit dtype exactly: {} "
        "warps splitting K over {} columns per block, {} steps of 64 in flight per warp (16 "
        "bytes of B per lane), A loaded beside its instructions, up to {} rows, fp32 "
        "accumulation{}",
        MmaE4m3Config::kWarps, MmaE4m3Config::kColumnsPerBlock, MmaE4m3Config::kUnroll,
        kSkinnyMaxRows, split());
  if (launch.form == SkinnyForm::TensorCores)
    return fmt::format(
        "tensor cores (mma.sync m16n8k16): {} warps splitting K over {} columns per block, {} "
        "steps of 32 in flight per warp, up to {} rows, fp32 accumulation{}",
        MmaLibraryConfig::kWarps, MmaLibraryConfig::kColumnsPerBlock, MmaLibraryConfig::kUnroll,
        kSkinnyMaxRows, split());
  return fmt::format(
      "{} warps of {} columns per block, {} vectors per column in flight, up to {} rows, fp32 "
      "accumulation",
      LibraryConfig::kWarps, LibraryConfig::kCols, LibraryConfig::kUnroll, kSkinnyCudaCoreMaxRows);
}

void launch_skinny_gemm(const GemmProblem& pr, const void* a, const void* b, const void* c,
                        const void* bias, void* d, const SkinnyLaunch& launch, void* workspace,
                        std::size_t workspace_bytes, cudaStream_t stream,
                        const float* b_e4m3_scales) {
  const SkinnyForm form = launch.form;
  // The selector admitted the problem (skinny_layout_problem); these restate its invariants.
  const MatrixView op_a = pr.op_a(), op_b = pr.op_b();
  require(pr.m >= 1 && pr.m <= kSkinnyMaxRows && op_a.col_stride == 1 && op_b.row_stride == 1 &&
              pr.d.col_stride == 1 && (!pr.has_c || pr.c.col_stride == 1) && pr.batch <= 65535,
          GE2_ERROR_INTERNAL, "cuda_skinny: GEMM {} is outside the kernel's layouts", pr);
  require(
      form == SkinnyForm::CudaCores ? pr.m <= kSkinnyCudaCoreMaxRows : dtype_size(pr.dtype) == 2,
      GE2_ERROR_INTERNAL, "cuda_skinny: GEMM {} is outside the {} form", pr,
      form == SkinnyForm::CudaCores ? "CUDA-core" : "tensor-core");
  require(b_e4m3_scales == nullptr || form == SkinnyForm::TensorCores, GE2_ERROR_INTERNAL,
          "cuda_skinny: an e4m3 weight runs on the tensor-core form only (GEMM {})", pr);
  require(launch.k_splits == 1 ||
              (form == SkinnyForm::TensorCores && pr.batch == 1 && launch.k_splits <= 64),
          GE2_ERROR_INTERNAL, "cuda_skinny: K split over {} blocks for GEMM {}", launch.k_splits,
          pr);
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
  p.b_scale = b_e4m3_scales;
  const bool block_scales = b_e4m3_scales != nullptr && pr.b_scale_block_k > 0;
  if (block_scales) {
    // skinny_fp8w_layout_problem admitted the blocks: whole steps along K, whole tiles along N.
    require(skinny_fp8_scale_blocks_fit(pr.b_scale_block_n, pr.b_scale_block_k, pr.n),
            GE2_ERROR_INTERNAL, "cuda_skinny_fp8w: scale blocks {}x{} for GEMM {}",
            pr.b_scale_block_n, pr.b_scale_block_k, pr);
    p.b_scale_block_n = static_cast<int>(pr.b_scale_block_n);
    p.b_scale_block_k = static_cast<int>(pr.b_scale_block_k);
    p.b_scale_ld =
        static_cast<int>(fp8_scale_ld((pr.k + pr.b_scale_block_k - 1) / pr.b_scale_block_k));
    while ((kSkinnyFp8StepK << p.b_scale_step_shift) < pr.b_scale_block_k) ++p.b_scale_step_shift;
  }
  if (launch.k_splits > 1) {
    const SplitWorkspace w = split_workspace(pr, launch.k_splits);
    if (workspace != nullptr && workspace_bytes >= w.bytes) {
      p.splits = launch.k_splits;
      p.partial = static_cast<float*>(workspace);
      p.counters = reinterpret_cast<unsigned*>(static_cast<char*>(workspace) + w.counters_offset);
      GE2_CUDA_CHECK(cudaMemsetAsync(p.counters, 0, w.bytes - w.counters_offset, stream));
    }
  }
  with_cuda_type(pr.dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    const int batch = static_cast<int>(pr.batch);
    if constexpr (sizeof(T) == 2) {
      if (block_scales) {
        GE2_CUDA_CHECK(
            (skinny::launch_mma<T, MmaE4m3Config, __nv_fp8_storage_t, true>(p, batch, stream)));
        return;
      }
      if (b_e4m3_scales != nullptr) {
        GE2_CUDA_CHECK(
            (skinny::launch_mma<T, MmaE4m3Config, __nv_fp8_storage_t>(p, batch, stream)));
        return;
      }
      if (form == SkinnyForm::TensorCores) {
        GE2_CUDA_CHECK((skinny::launch_mma<T, MmaLibraryConfig>(p, batch, stream)));
        return;
      }
    }
    GE2_CUDA_CHECK((skinny::launch<T, LibraryConfig, kSkinnyCudaCoreMaxRows>(p, batch, stream)));
  });
}

}  // namespace ge2::cuda
