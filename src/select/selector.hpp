// Kernel selection for GEMM nodes: availability rules, precision policy, a cost
// model calibrated on the H200, and measured timings when the tuning cache has them.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/kernel_problems.hpp"
#include "select/device_info.hpp"
#include "select/kernel_id.hpp"

namespace ge2 {

struct SelectionPolicy {
  bool allow_tf32 = false;
  bool allow_staging = true;
  // FP8 e4m3 kernels may run 16-bit GEMMs whose relative Frobenius error, measured
  // at compile against the 16-bit kernel, stays within fp8_max_error (docs/fp8.md).
  bool allow_fp8 = false;
  double fp8_max_error = 0.1;
  std::optional<KernelId> forced;
};

struct Candidate {
  KernelId kernel{};
  bool feasible = false;
  double estimated_us = 0;  // lower is better; from measurement when `measured`
  double model_us = 0;      // the cost model's estimate, measured or not
  bool measured = false;
  bool staged = false;  // operands copied into 16-byte-aligned buffers first
  // Chosen only on a measured time or when forced (KernelInfo::needs_measurement,
  // max_rows_untuned).
  bool needs_measurement = false;
  // Preferred to every estimate when nothing is measured (KernelInfo::gated_min_rows_untuned).
  bool preferred_untuned = false;
  std::string reason;  // why infeasible, or what the estimate rests on
};

struct Selection {
  KernelId kernel{};
  bool staged = false;
  std::string why;
  std::vector<Candidate> candidates;
};

// Measured time in microseconds of `kernel` on `problem`, if known.
using MeasuredTime = std::function<std::optional<double>(KernelId, const GemmProblem&)>;

// Whether a cuBLASLt kernel can express the layout (one unit stride per operand,
// row-major D, unit-stride bias); empty when it can, else the reason.
std::string cublaslt_layout_problem(const GemmProblem& problem);
// Whether cuBLASLt `kernel`'s untuned algorithm for the problem is the heuristic's
// first for no workspace (KernelInfo::unsplit_*_untuned: decode-sized GEMMs of
// many columns) rather than its first under the context's workspace.
bool unsplit_first_choice(const GemmProblem& problem, KernelId kernel);
// Whether ge2's CUTLASS kernels can run the problem: K contiguous in op(A) and
// op(B) (row-major A; B as nn.Linear's [N, K] weight), row-major C and D, every
// leading dimension and batch stride a multiple of 16 bytes, a contiguous bias
// and a batch that either has its own operands or folds into M. Empty when they
// can, else the reason (the plan shows it).
std::string cutlass_layout_problem(const GemmProblem& problem);
// Why `kernel` cannot compute the problem's gated unit (GemmProblem::gated) in
// its epilogue: it has none (KernelInfo::gated_epilogue), a C, an activation of
// the GEMM's own, an odd N; for the CUTLASS rows also I = N / 2 not a multiple
// of 8 (they interleave the halves in blocks of eight), B not an unbatched
// [N, K] weight (trans_b), a gated output that is not row-major with rows on
// 4-byte boundaries (pairs of outputs are stored together). Empty when it can.
std::string gated_epilogue_problem(const GemmProblem& problem, KernelId kernel);
// Whether an FP8 row can run the problem: f16 or bf16, one batch (after folding
// it into M), K a multiple of 16 (the e4m3 copies' rows are 16-byte aligned),
// row-major C and D with 16-byte aligned rows, a contiguous bias. Empty when it
// can, else the reason.
std::string fp8_layout_problem(const GemmProblem& problem);
// Whether `kernel` (unstaged) runs `act` as a separate pass over D after its GEMM:
// the cuBLASLt rows, 16-bit and FP8, for the activations cuBLASLt has no
// epilogue for (erf GELU, SiLU, QuickGELU). Every other row computes it in its
// epilogue, the staged form in its copy back.
bool runs_separate_activation_pass(KernelId kernel, Activation act);
// An operand of an FP8 step in memory: `rows` float scales (one per row; a
// block-scaled weight's: fp8_weight_scale_count), then the rows x k e4m3 copy,
// each part starting on a 256-byte boundary.
std::size_t fp8_scales_bytes(std::int64_t rows);
std::size_t fp8_operand_bytes(std::int64_t rows, std::int64_t k);
// Device scratch an FP8 step needs: op(A) as such an operand (M rows; with
// fp8_a_scale_count(problem) scales) and, unless
// B is a constant quantized at compile (`b_prepared`), op(B)^T (N rows) after it.
std::size_t fp8_scratch_bytes(const GemmProblem& problem, bool b_prepared);
// Whether B is given with the kFp8ScaleBlock x kFp8ScaleBlock block scales
// cuBLASLt's block-scale mode reads (KernelInfo::fp8_block_scales): lt_fp8_e4m3 then
// quantizes A per row and kFp8ScaleBlock k instead of per row.
bool fp8_block_scaled(const GemmProblem& problem);
// Why lt_fp8_e4m3's block-scale mode cannot run such a problem, empty when it can (or
// when the problem is not block-scaled): M (a folded batch included) a multiple of 4
// and K of 4 x 128. Where they are, the rows of
// A's scale grid (M) and of the weight's (K blocks) fill 16 bytes, and the layouts the
// sources on cuBLASLt's VEC128_32F / BLK128x128_32F modes give (PyTorch: rows of
// exactly M and K / 128 scales; other callers: padded to 4) coincide; the layouts were
// not yet probed on a device (bench/lt_block_scale_probe answers it). The accuracy
// gate's calibration (256 rows) could not tell the two apart on A.
std::string fp8_block_mode_problem(const GemmProblem& problem);
// The scales of A the FP8 scratch holds: one per row, or on such a problem one per
// row and k block, (row i, k block j) at j * fp8_scale_ld(M) + i (cuBLASLt's
// VEC128_32F layout).
std::int64_t fp8_a_scale_count(const GemmProblem& problem);
// The scales of an FP8 weight prepared at compile: one per row of op(B)^T, or for a
// weight given with scales in blocks along K (problem.b_scale_block_k), one per
// block of op(B)^T, row-major by N block, fp8_scale_ld(K blocks) per N block
// (cuBLASLt's BLK128x128_32F layout; cuda_skinny_fp8w reads the same).
std::int64_t fp8_weight_scale_count(const GemmProblem& problem);
// Bytes of an FP8 weight prepared at compile: op(B)^T, [N, K], as such an operand
// with fp8_weight_scale_count(problem) scales.
std::size_t fp8_weight_bytes(const GemmProblem& problem);
// The problem cut to its first `rows` rows of A, C and D (the FP8 accuracy gate's calibration).
GemmProblem with_rows(const GemmProblem& problem, std::int64_t rows);

// The problem cuda_skinny runs: the batch folded into M where that keeps M within
// its rows, else the batch as it is.
GemmProblem skinny_problem(const GemmProblem& problem);
// Whether cuda_skinny runs `folded` (skinny_problem's result) on tensor cores: 16-bit
// data, two rows or more, compute capability 8.0 or later (mma.sync bf16).
bool skinny_on_tensor_cores(const GemmProblem& folded, const DeviceInfo& device);
// Why cuda_skinny cannot run the problem on `device`, empty when it can: at most
// kSkinnyMaxRows rows on tensor cores, kSkinnyCudaCoreMaxRows on CUDA cores, K
// contiguous in op(A) and op(B) with rows and batch strides of 16-byte multiples,
// row-major C and D, and enough columns to give half the SMs a block.
std::string skinny_layout_problem(const GemmProblem& problem, const DeviceInfo& device);
// Why cuda_skinny_fp8w cannot run the problem on `device`, empty when it can: B a
// constant (its e4m3 copy is made at compile), at most kSkinnyMaxRows rows after
// folding a batch, op(A) row-major with 16-byte rows, enough columns to give half
// the SMs a block, scales in blocks along K covering whole steps and tiles
// (kSkinnyFp8StepK, kSkinnyTileColumns; fp8_layout_problem's rules hold too).
std::string skinny_fp8w_layout_problem(const GemmProblem& problem, const DeviceInfo& device);
// The problem with a batch folded into M where its operands allow (B shared by
// every batch, A, C and D batches back to back); else unchanged.
GemmProblem fold_batch_into_m(const GemmProblem& problem);
// Whether every leading dimension and batch stride is a multiple of 16 bytes.
bool is_tensor_core_aligned(const GemmProblem& problem);
// The largest power of two, at most 16, dividing every leading dimension and batch
// stride in bytes: cuBLASLt algorithms valid for one value may refuse a smaller one.
std::int64_t layout_alignment_bytes(const GemmProblem& problem);
// The aligned problem a staged cuBLASLt step runs: op(A) as row-major [M, Kp],
// op(B) as [Kp, Np], D as [M, Np], with K and N rounded up to 16 bytes of elements.
GemmProblem staged_problem(const GemmProblem& problem);
// Bytes the staging copies move (read + write of A, B, C and D).
double staging_bytes(const GemmProblem& problem);

// Ranks the kernels a backend `offered` for `problem` and picks one: the forced
// kernel (GE2_ERROR_UNSUPPORTED if it cannot run), else the lowest measured or
// estimated time. Every offered kernel appears in the candidates with its reason.
Selection select_gemm_kernel(const GemmProblem& problem, const DeviceInfo& device,
                             const SelectionPolicy& policy, const MeasuredTime& measured = {},
                             std::span<const KernelId> offered = kAllKernels);

// Picks selection.kernel among selection.candidates (as select_gemm_kernel does).
void choose_kernel(Selection& selection, const GemmProblem& problem, const SelectionPolicy& policy,
                   bool aligned);

// The backend could not build selection.kernel (no cuBLASLt algorithm, say):
// marks it infeasible with `refusal` and picks the next best, so the plan names
// the kernel that runs. A forced kernel is never substituted: that is
// GE2_ERROR_UNSUPPORTED with the refusal.
void refuse_and_reselect(Selection& selection, const GemmProblem& problem,
                         const SelectionPolicy& policy, const std::string& refusal);

}  // namespace ge2
