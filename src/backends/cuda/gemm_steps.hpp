// The CUDA backend's executable steps. Each kind of step lives in its own file;
// the backend creates them through these functions.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backends/cuda/algo_choice.hpp"
#include "backends/cuda/kernels.hpp"
#include "exec/backend.hpp"

namespace ge2::cuda {

// Whether `p` sits on a 16-byte boundary: what TMA (CUTLASS), 16-byte vector loads
// (cuda_skinny) and cuBLASLt's FP8 kernels need; other pointers take a fallback step.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// cuBLASLt GEMM with its epilogue (and the erf-GELU pass where cuBLASLt has none).
std::unique_ptr<Step> make_lt_gemm_step(cublasLtHandle_t handle, const GemmProblem& problem,
                                        KernelId kernel, const GemmSlots& slots,
                                        AlgoChooser& chooser, TuneUse tune);
// The same on zero-padded aligned copies of unaligned 16-bit operands.
std::unique_ptr<Step> make_staged_gemm_step(cublasLtHandle_t handle, const GemmProblem& problem,
                                            KernelId kernel, const GemmSlots& slots,
                                            AlgoChooser& chooser, TuneUse tune);
// A CUTLASS kernel row (sm90a builds with CUTLASS only); `unaligned_fallback`
// runs executions whose pointers are not 16-byte aligned (none for a gated
// problem, whose step's accepts() the plan asks instead).
std::unique_ptr<Step> make_cutlass_gemm_step(const GemmProblem& problem, KernelId kernel,
                                             const GemmSlots& slots, int device, int sm_count,
                                             std::unique_ptr<Step> unaligned_fallback);
// Bytes of a gated GEMM's weight and bias as the gated CUTLASS instances read
// them, and the copy itself, made synchronously from the constant B and bias
// (GemmProblem::gated; CUTLASS builds only).
std::size_t gated_weight_bytes(const GemmProblem& problem);
void prepare_gated_weight(const GemmProblem& problem, const void* b, const void* bias,
                          void* prepared);
// Readies the CUTLASS rows for timing in the tuning mode (CUTLASS builds only).
std::unique_ptr<FamilyTimer> make_cutlass_timer(int device, int sm_count);
// The plan text of a step whose kernel fuses the whole epilogue: name, family,
// configuration, the epilogue, the step that runs unaligned pointers and, where
// a batch was folded, the rows it became.
nlohmann::json fused_kernel_description(std::string_view name, std::string_view family,
                                        const std::string& configuration,
                                        const GemmProblem& problem, bool folded,
                                        const Step* unaligned_fallback);
// cuda_skinny for decode-sized M; `unaligned_fallback` runs executions whose A
// or B pointer is not 16-byte aligned.
std::unique_ptr<Step> make_skinny_gemm_step(const GemmProblem& problem, const GemmSlots& slots,
                                            const DeviceInfo& device,
                                            std::unique_ptr<Step> unaligned_fallback);
// cuda_skinny_fp8w (W8A16, docs/fp8.md): cuda_skinny's tensor-core form on the e4m3
// copy of a constant B in GemmSlots::b_prepared (prepare_fp8_weight), A as stored, or
// copied into an aligned buffer first where its pointer is not 16-byte aligned; it
// never reads GemmSlots::b.
std::unique_ptr<Step> make_skinny_fp8w_gemm_step(const GemmProblem& problem, const GemmSlots& slots,
                                                 const DeviceInfo& device);
// Readies cuda_skinny for timing in the tuning mode.
std::unique_ptr<FamilyTimer> make_skinny_timer(const DeviceInfo& device);
// How cuda_skinny runs `folded` (the batch folded into M) on `device`: tensor cores
// for 16-bit data from two rows on compute capability 8.0 and later
// (skinny_on_tensor_cores), else CUDA cores; on tensor cores, one batch, K split as
// skinny_k_splits says for the device's SMs keeping `tensor_core_blocks_per_sm`
// blocks resident (skinny_tensor_core_blocks_per_sm).
SkinnyLaunch skinny_launch(const GemmProblem& folded, const DeviceInfo& device,
                           int tensor_core_blocks_per_sm);
// lt_fp8_e4m3 and lt_fp8_e4m3_fast (docs/fp8.md): row-wise e4m3 quantization of op(A) (and of
// op(B)^T unless GemmSlots::b_prepared holds prepare_fp8_weight's copy) into the scratch slot,
// then cuBLASLt's e4m3 GEMM with outer-vector scales; `unaligned_fallback` runs executions whose
// C, bias or D pointer is not 16-byte aligned.
std::unique_ptr<Step> make_fp8_gemm_step(cublasLtHandle_t handle, const GemmProblem& problem,
                                         KernelId kernel, const GemmSlots& slots,
                                         AlgoChooser& chooser, int sm_count,
                                         std::unique_ptr<Step> unaligned_fallback);
// An operand in fp8_operand_bytes' layout (an FP8 step's scratch, a weight
// prepare_fp8_weight made): its rows' scales, then its e4m3 rows.
struct Fp8Operand {
  float* scales;
  std::uint8_t* data;
};
Fp8Operand fp8_operand(void* block, std::int64_t scale_count);
// `problem` with B read from prepare_fp8_weight's copy: dense, K-contiguous, [N, K].
GemmProblem with_prepared_fp8_weight(const GemmProblem& problem);
// Writes the e4m3 copy of the constant op(B)^T and its channel scales into `prepared`
// (fp8_weight_bytes(problem) bytes), synchronously.
void prepare_fp8_weight(const GemmProblem& problem, const void* b, void* prepared, int sm_count);
// The same copy made of B's e4m3 bytes and scales as the caller gave them
// (problem.b_e4m3): no quantization, op(B)^T's rows and their channel scales, or
// the grid of block scales in op(B)^T's orientation (problem.b_scale_block_k).
void prepare_given_fp8_weight(const GemmProblem& problem, const QuantizedData& given,
                              void* prepared);
// cuda_f32: any dtype, layout and epilogue.
std::unique_ptr<Step> make_fallback_gemm_step(const GemmProblem& problem, const GemmSlots& slots);
std::unique_ptr<Step> make_elementwise_step(const ElementwiseProblem& problem,
                                            const ElementwiseSlots& slots, int sm_count);

}  // namespace ge2::cuda
