// Launchers for ge2's own CUDA kernels. Each checks its launch (the elementwise,
// copy, fallback GEMM and cuda_skinny launchers through the error each launch
// returns; a failure throws and clears CUDA's last error). The elementwise,
// copy, fallback GEMM and cuda_skinny kernels launch programmatically dependent
// on the kernel before them on the stream (dependent_launch.cuh): on Hopper the
// launch overlaps that kernel's end (run 28, H200: about 1 us less per pass
// after a cuBLASLt GEMM on an eager stream; the same inside a CUDA graph).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "ir/kernel_problems.hpp"
#include "select/kernel_id.hpp"

namespace ge2::cuda {

// cuda_f32: tiled fp32 GEMM (+C, bias, activation) over any dtype, size,
// alignment and strides; the selector's universal fallback.
void launch_fallback_gemm(const GemmProblem& problem, const void* a, const void* b, const void* c,
                          const void* bias, void* d, cudaStream_t stream);

// out = act(combine(x, y) + bias) over any strides; x may equal out (in place).
// Row-contiguous 16-byte-aligned tensors take a row path, dense ones a flat
// one; a y (add or multiply) rides along on the flat path when it is laid out
// like a dense x, on the row path when its rows are aligned 16-byte vectors
// (broadcast over rows included), and otherwise the strided kernel runs; those two
// size their grids by the device's `sm_count`.
void launch_elementwise(const ElementwiseProblem& problem, const void* x, const void* bias,
                        void* out, int sm_count, cudaStream_t stream, const void* y = nullptr);

// dst[z][i][j] = act(src(z, i, j)) inside src's rows x cols, 0 in the rest of
// dst's extent: staging copies into aligned, zero-padded buffers and copies back
// (the copy back applies the activation cuBLASLt's epilogue could not).
void launch_copy_matrix(DType dtype, const MatrixView& src, const void* src_data,
                        const MatrixView& dst, void* dst_data, cudaStream_t stream,
                        Activation act = Activation::None);

// Row-wise FP8 e4m3 quantization (lt_fp8_e4m3): dst, a dense row-major
// src.rows x src.cols copy, gets e4m3(src(i, j) * 448 / amax_i) rounded to nearest
// even and saturated at +-448, where amax_i = max_j |src(i, j)|; row_scales[i]
// gets amax_i / 448 (1 for an all-zero row, NaN for a row holding a NaN), the
// factor cuBLASLt multiplies back (its outer-vector scale mode). `act` (a
// deferred activation, GemmProblem::a_act) replaces each src(i, j) by act(src(i, j))
// rounded to `dtype` first. One launch on `stream`, no host synchronization
// (capturable).
void launch_quantize_e4m3_rows(DType dtype, const MatrixView& src, const void* src_data,
                               std::uint8_t* dst, float* row_scales, int sm_count,
                               cudaStream_t stream, Activation act = Activation::None);

// The same with one scale per row and kFp8ScaleBlock columns (lt_fp8_e4m3 on a
// weight given with 128 x 128 block scales: cuBLASLt's VEC128_32F mode): group j of
// row i is scaled by its own amax, and scales[j * scale_ld + i] gets amax / 448.
void launch_quantize_e4m3_groups(DType dtype, const MatrixView& src, const void* src_data,
                                 std::uint8_t* dst, float* scales, std::int64_t scale_ld,
                                 int sm_count, cudaStream_t stream,
                                 Activation act = Activation::None);

// Tiles of the fallback kernel, exported for the plan text.
inline constexpr int kFallbackTileM = 64, kFallbackTileN = 64, kFallbackTileK = 16;

// cuda_skinny: D = act(alpha * A * op(B) + beta * C + bias) for M <= kSkinnyMaxRows
// rows, op(A) and op(B) K-contiguous with 16-byte-aligned rows (the selector's
// skinny_layout_problem), A and B at 16-byte-aligned addresses.
// CudaCores: skinny_gemm.cuh, every dtype. TensorCores: skinny_mma.cuh, 16-bit
// data on compute capability 8.0 and later (mma.sync), up to 16 rows; chosen by
// skinny_launch (gemm_steps.hpp). CUDA cores take at most kSkinnyCudaCoreMaxRows rows.
enum class SkinnyForm { CudaCores, TensorCores };
// How one cuda_skinny GEMM runs: its form and, on tensor cores, over how many
// blocks each column tile's K is split (skinny_k_splits; 1: not split).
struct SkinnyLaunch {
  SkinnyForm form = SkinnyForm::CudaCores;
  int k_splits = 1;
};
// Blocks of the tensor-core form for up to 8 rows of `dtype` (16-bit) that one SM
// of the current device keeps resident: with the SM count, the `slots` of
// skinny_k_splits.
// With `e4m3_weight`, the instance that reads an e4m3 B (cuda_skinny_fp8w).
int skinny_tensor_core_blocks_per_sm(DType dtype, bool e4m3_weight = false);
// Workspace launch_skinny_gemm uses for `launch` of `problem` (0 when K is not
// split): the fp32 partial sums, then a counter per column tile.
std::size_t skinny_workspace_bytes(const GemmProblem& problem, const SkinnyLaunch& launch);
// A split launch zeroes its counters on `stream` first (the workspace is shared
// with the stream's other steps). With less workspace than skinny_workspace_bytes
// it runs unsplit, correct and slower; the rule's grids (at most two waves of
// resident blocks, at most 8 rows) need a few MB of the 32 MB per stream.
// With `b_e4m3_scales`, B holds e4m3 bytes (problem.op_b() K-contiguous: the dense
// [N, K] copy prepare_fp8_weight makes) and b_e4m3_scales[j] is column j's
// dequantization scale; the tensor-core form only (cuda_skinny_fp8w).
void launch_skinny_gemm(const GemmProblem& problem, const void* a, const void* b, const void* c,
                        const void* bias, void* d, const SkinnyLaunch& launch, void* workspace,
                        std::size_t workspace_bytes, cudaStream_t stream,
                        const float* b_e4m3_scales = nullptr);
// The configuration `launch` runs, as the plan and the tuning database name it
// (a stored row of another configuration is stale).
// With `e4m3_weight`, cuda_skinny_fp8w's (the instance that reads an e4m3 B).
std::string skinny_configuration(const SkinnyLaunch& launch, bool e4m3_weight = false);

}  // namespace ge2::cuda
