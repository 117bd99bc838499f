// lt_fp8_e4m3 step: op(A) is quantized to e4m3 row by row on every execution
// (fp8_quantize.cu), op(B)^T too unless it is a constant the plan quantized
// once at compile (prepare_fp8_weight), and cuBLASLt multiplies the e4m3 copies
// with their row scales as outer-vector scales (D[i, j] gets scale_a[i] *
// scale_b[j]), accumulating in fp32 and writing D in the problem's 16-bit dtype
// with the usual epilogue. On a weight given with 128 x 128 block scales
// (fp8_block_scaled) the copy of A has a scale per row and 128 k instead, and
// cuBLASLt reads both as block scales (VEC128_32F for A, BLK128x128_32F for the
// weight's given grid), each applied to its own partial sums; cuBLASLt has no fast
// accumulation there. A deferred activation of A (GemmProblem::a_act) is
// applied by the quantization pass; the unfused fallback, which reads A as
// stored, gets A activated in place first (A is then an intermediate only this
// GEMM reads: plan_steps.cpp). cuBLASLt's e4m3 kernels take the "TN" layout only:
// both copies are written K-contiguous ([M, K] and [N, K]), whatever the
// operands' own layouts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "core/error.hpp"
#include "select/selector.hpp"

namespace ge2::cuda {
namespace {

// op(B) transposed, N x K: the view the weight's e4m3 copy is written from.
MatrixView op_b_transposed(const GemmProblem& p) {
  const MatrixView b = p.op_b();
  return {1, b.cols, b.rows, 0, b.col_stride, b.row_stride};
}

// The problem cuBLASLt runs: dense K-contiguous e4m3 copies, C and D as given.
GemmProblem quantized_problem(const GemmProblem& p) {
  GemmProblem q = with_prepared_fp8_weight(p);
  q.trans_a = false;
  q.a = {1, p.m, p.k, 0, p.k, 1};
  return q;
}

class Fp8GemmStep final : public Step {
 public:
  Fp8GemmStep(cublasLtHandle_t handle, const GemmProblem& problem, KernelId kernel,
              const GemmSlots& slots, AlgoChooser& chooser, int sm_count,
              std::unique_ptr<Step> unaligned_fallback)
      : problem_(fold_batch_into_m(problem)),
        kernel_(kernel),
        folded_(problem_.batch != problem.batch),
        block_scaled_(fp8_block_scaled(problem_)),
        slots_(slots),
        sm_count_(sm_count),
        matmul_(handle, quantized_problem(problem_), kernel),
        fallback_(std::move(unaligned_fallback)) {
    const std::string layout = fp8_layout_problem(problem_);
    require(layout.empty(), GE2_ERROR_UNSUPPORTED, "{}", layout);
    require(slots.scratch >= 0, GE2_ERROR_INTERNAL, "lt_fp8_e4m3: the plan gave no scratch slot");
    require(!block_scaled_ || slots.b_prepared >= 0, GE2_ERROR_INTERNAL,
            "lt_fp8_e4m3: a block-scaled weight without its prepared copy");
    const std::string block_mode = fp8_block_mode_problem(problem_);
    require(block_mode.empty(), GE2_ERROR_UNSUPPORTED, "lt_fp8_e4m3: {}", block_mode);
    // The algorithm is cuBLASLt's heuristic choice (the tuner does not time FP8 rows
    // yet), asked for with the scale modes and scale pointers set, as every run has
    // them: stand-in aligned addresses that the query does not read; run() sets the
    // real ones.
    if (block_scaled_)
      matmul_.set_scale_modes(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                              CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
    else
      matmul_.set_scale_mode(CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
    const auto* stand_in = reinterpret_cast<const float*>(std::uintptr_t{256});
    matmul_.set_scale_pointers(stand_in, stand_in + 64);
    try {
      choice_ = chooser.heuristic(matmul_, 16);
    } catch (const Error& error) {
      if (error.status() != GE2_ERROR_CUBLAS) throw;
      // cuBLASLt 13.1 refuses the query (CUBLAS_STATUS_NOT_SUPPORTED) under a
      // workspace for some outer-vector problems (256 or 16 x 4096 x 11008 on the
      // H100, run 29) and answers it without one.
      choice_ = chooser.heuristic(matmul_, 16, true);
    }
    if (matmul_.needs_separate_activation()) activation_ = matmul_.activation_pass();
    // A as stored, activated in place for the fallback; A read by every batch
    // (stride 0) once.
    if (problem.a_act != Activation::None)
      a_activation_ = activation_in_place(
          problem.dtype, problem.a.batch_stride == 0 ? 1 : problem.batch, problem.a, problem.a_act);
  }

  void run(const ExecState& s) override {
    const void* a = slot_pointer(s, slots_.a);
    const void* b = slot_pointer(s, slots_.b);
    const void* c = slot_pointer(s, slots_.c);
    const void* bias = slot_pointer(s, slots_.bias);
    void* d = slot_pointer(s, slots_.d);
    // The 16-bit epilogue operands keep the caller's addresses: cuBLASLt's FP8
    // kernels want them 16-byte aligned, as the CUTLASS rows do.
    const auto stream = static_cast<cudaStream_t>(s.stream);
    for (const void* p : {c, bias, static_cast<const void*>(d)}) {
      if (p == nullptr || aligned16(p)) continue;
      if (a_activation_) {
        void* a_stored = slot_pointer(s, slots_.a);
        launch_elementwise(*a_activation_, a_stored, nullptr, a_stored, sm_count_, stream);
      }
      return fallback_->run(s);
    }
    void* scratch = slot_pointer(s, slots_.scratch);
    const Fp8Operand a_q = fp8_operand(scratch, fp8_a_scale_count(problem_));
    if (block_scaled_)
      launch_quantize_e4m3_groups(problem_.dtype, problem_.op_a(), a, a_q.data, a_q.scales,
                                  fp8_scale_ld(problem_.m), sm_count_, stream, problem_.a_act);
    else
      launch_quantize_e4m3_rows(problem_.dtype, problem_.op_a(), a, a_q.data, a_q.scales, sm_count_,
                                stream, problem_.a_act);
    Fp8Operand b_q{};
    if (slots_.b_prepared >= 0) {
      b_q = fp8_operand(slot_pointer(s, slots_.b_prepared), fp8_weight_scale_count(problem_));
    } else {
      b_q = fp8_operand(static_cast<std::uint8_t*>(scratch) + fp8_scratch_bytes(problem_, true),
                        problem_.n);
      launch_quantize_e4m3_rows(problem_.dtype, op_b_transposed(problem_), b, b_q.data, b_q.scales,
                                sm_count_, stream);
    }
    // cuBLASLt's first operand is ge2's B (the transpose trick), its second ge2's A.
    matmul_.set_scale_pointers(b_q.scales, a_q.scales);
    matmul_.run(choice_.algo, {a_q.data, b_q.data, c, bias, d}, s.workspace, s.workspace_bytes,
                stream);
    if (matmul_.needs_separate_activation())
      launch_elementwise(activation_, d, nullptr, d, sm_count_, stream);
  }

  nlohmann::json describe() const override {
    nlohmann::json j{
        {"name", kernel_name(kernel_)},
        {"family", "cublaslt_fp8"},
        {"epilogue", matmul_.epilogue_name()},
        {"separate_activation_kernel", matmul_.needs_separate_activation()},
        {"algo", choice_.config.to_json()},
        {"algo_source", choice_.source},
        {"scales",
         block_scaled_
             ? "block-wise, amax / 448: one per row of A and 128 k (cuBLASLt VEC128_32F), the "
               "weight's given scale per 128x128 block (BLK128x128_32F)"
             : "row-wise, amax / 448: one per row of A and per output channel of B "
               "(cuBLASLt outer-vector scales)"},
        {"a_quantized", problem_.a_act == Activation::None
                            ? "every execution (one pass)"
                            : fmt::format("every execution (one pass), after {} (deferred from "
                                          "the GEMM that produced A)",
                                          activation_name(problem_.a_act))},
        {"b_quantized", problem_.b_e4m3          ? "no: given in e4m3 (a quantized constant)"
                        : slots_.b_prepared >= 0 ? "once, at compile (constant weight)"
                                                 : "every execution"},
        {"accumulate",
         kernel_ == KernelId::LtFp8E4M3Fast ? "fast (CUBLASLT_MATMUL_DESC_FAST_ACCUM)" : "fp32"},
        {"unaligned_pointers_run", fallback_->describe().value("name", "")}};
    if (folded_) j["batch_folded_into_m"] = problem_.m;
    return j;
  }

 private:
  GemmProblem problem_;
  KernelId kernel_;
  bool folded_;
  bool block_scaled_;  // fp8_block_scaled: cuBLASLt's block-scale modes
  GemmSlots slots_;
  int sm_count_;
  LtMatmul matmul_;
  AlgoChoice choice_;
  ElementwiseProblem activation_;
  std::optional<ElementwiseProblem> a_activation_;  // A in place, before the fallback
  std::unique_ptr<Step> fallback_;
};

}  // namespace

Fp8Operand fp8_operand(void* block, std::int64_t scale_count) {
  auto* bytes = static_cast<std::uint8_t*>(block);
  return {reinterpret_cast<float*>(bytes), bytes + fp8_scales_bytes(scale_count)};
}

GemmProblem with_prepared_fp8_weight(const GemmProblem& problem) {
  GemmProblem q = problem;
  q.trans_b = true;
  q.b = {1, problem.n, problem.k, 0, problem.k, 1};
  return q;
}

void prepare_fp8_weight(const GemmProblem& problem, const void* b, void* prepared, int sm_count) {
  const GemmProblem p = fold_batch_into_m(problem);
  const Fp8Operand weight = fp8_operand(prepared, fp8_weight_scale_count(p));
  launch_quantize_e4m3_rows(p.dtype, op_b_transposed(p), b, weight.data, weight.scales, sm_count,
                            nullptr);
  GE2_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

void prepare_given_fp8_weight(const GemmProblem& problem, const QuantizedData& given,
                              void* prepared) {
  // B is [N, K] with trans_b (its rows are op(B)^T's), else [K, N].
  const int channel_axis = problem.trans_b ? 0 : 1;
  const bool blocks = problem.b_scale_block_k > 0;
  const auto scales = given.scales_along(channel_axis);
  require(problem.b_e4m3 && (blocks || scales) &&
              given.rows * given.cols == problem.n * problem.k &&
              given.data.size() == static_cast<std::size_t>(problem.n * problem.k),
          GE2_ERROR_INTERNAL, "the e4m3 weight given does not match GEMM {}", problem);
  std::vector<std::uint8_t> block(fp8_weight_bytes(problem));
  const Fp8Operand weight = fp8_operand(block.data(), fp8_weight_scale_count(problem));
  if (blocks) {
    // The grid as op(B)^T sees it: N blocks by K blocks, transposed for a [K, N] B.
    const std::int64_t grid_n = problem.trans_b ? given.grid_rows() : given.grid_cols();
    const std::int64_t grid_k = problem.trans_b ? given.grid_cols() : given.grid_rows();
    const std::int64_t ld = fp8_scale_ld(grid_k);
    require(grid_n * ld == fp8_weight_scale_count(problem), GE2_ERROR_INTERNAL,
            "the e4m3 weight's {} do not match GEMM {}", given.scales_text(), problem);
    for (std::int64_t bn = 0; bn < grid_n; ++bn)
      for (std::int64_t bk = 0; bk < grid_k; ++bk)
        weight.scales[bn * ld + bk] = given.scales[static_cast<std::size_t>(
            problem.trans_b ? bn * grid_k + bk : bk * grid_n + bn)];
  } else {
    std::copy(scales->begin(), scales->end(), weight.scales);
  }
  for (std::int64_t n = 0; n < problem.n; ++n)
    for (std::int64_t k = 0; k < problem.k; ++k)
      weight.data[n * problem.k + k] = given.data[static_cast<std::size_t>(
          problem.trans_b ? n * problem.k + k : k * problem.n + n)];
  GE2_CUDA_CHECK(cudaMemcpy(prepared, block.data(), block.size(), cudaMemcpyHostToDevice));
  // From pageable memory the copy may still run when cudaMemcpy returns, unordered
  // with executions on non-blocking streams.
  GE2_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

std::unique_ptr<Step> make_fp8_gemm_step(cublasLtHandle_t handle, const GemmProblem& problem,
                                         KernelId kernel, const GemmSlots& slots,
                                         AlgoChooser& chooser, int sm_count,
                                         std::unique_ptr<Step> unaligned_fallback) {
  return std::make_unique<Fp8GemmStep>(handle, problem, kernel, slots, chooser, sm_count,
                                       std::move(unaligned_fallback));
}

}  // namespace ge2::cuda
