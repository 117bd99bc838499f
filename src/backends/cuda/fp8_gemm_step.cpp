// lt_fp8_e4m3 step: op(A) is quantized to e4m3 with a per-tensor scale on every
// execution (fp8_quantize.cu), op(B) too unless it is a constant the plan
// quantized once at compile (prepare_fp8_weight), and cuBLASLt multiplies the
// e4m3 copies with the scales as its A/B scale pointers, accumulating in fp32
// and writing D in the problem's 16-bit dtype with the usual epilogue.
// cuBLASLt's e4m3 kernels take the "TN" layout only: both copies are written
// K-contiguous ([M, K] and [N, K]), whatever the operands' own layouts.
#include <cstddef>
#include <cstdint>

#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "core/error.hpp"
#include "select/selector.hpp"

namespace ge2::cuda {
namespace {

// The scale block at the start of the scratch and of a prepared weight. Each
// scale cuBLASLt reads sits on its own 16-byte boundary: cublasLtMatmul refused
// (CUBLAS_STATUS_NOT_SUPPORTED) a scale pointer 8 bytes past one on the H200.
struct Fp8Scales {
  alignas(16) float a_scale;
  unsigned a_amax_bits;
  alignas(16) float b_scale;
  unsigned b_amax_bits;
};
static_assert(sizeof(Fp8Scales) <= kFp8ScaleBlock && offsetof(Fp8Scales, b_scale) % 16 == 0);

// op(B) transposed, N x K: the view the weight's e4m3 copy is written from.
MatrixView op_b_transposed(const GemmProblem& p) {
  const MatrixView b = p.op_b();
  return {1, b.cols, b.rows, 0, b.col_stride, b.row_stride};
}

// The problem cuBLASLt runs: dense K-contiguous e4m3 copies, C and D as given.
GemmProblem quantized_problem(const GemmProblem& p) {
  GemmProblem q = p;
  q.trans_a = false;
  q.a = {1, p.m, p.k, 0, p.k, 1};
  q.trans_b = true;
  q.b = {1, p.n, p.k, 0, p.k, 1};
  return q;
}

std::uint8_t* after_scales(void* block) {
  return static_cast<std::uint8_t*>(block) + kFp8ScaleBlock;
}

class Fp8GemmStep final : public Step {
 public:
  Fp8GemmStep(cublasLtHandle_t handle, const GemmProblem& problem, KernelId kernel,
              const GemmSlots& slots, AlgoChooser& chooser, int sm_count,
              std::unique_ptr<Step> unaligned_fallback)
      : problem_(fold_batch_into_m(problem)),
        kernel_(kernel),
        folded_(problem_.batch != problem.batch),
        slots_(slots),
        sm_count_(sm_count),
        matmul_(handle, quantized_problem(problem_), kernel),
        fallback_(std::move(unaligned_fallback)) {
    const std::string layout = fp8_layout_problem(problem_);
    require(layout.empty(), GE2_ERROR_UNSUPPORTED, "{}", layout);
    require(slots.scratch >= 0, GE2_ERROR_INTERNAL, "lt_fp8_e4m3: the plan gave no scratch slot");
    // The algorithm is cuBLASLt's heuristic choice (the tuner does not time FP8 rows
    // yet), asked for with scale pointers set, as every run has them: stand-in
    // aligned addresses that the query does not read; run() sets the real ones.
    const auto* stand_in = reinterpret_cast<const float*>(std::uintptr_t{256});
    matmul_.set_scale_pointers(stand_in, stand_in + 4);
    choice_ = chooser.heuristic(matmul_, 16);
    if (matmul_.needs_separate_activation()) activation_ = matmul_.activation_pass();
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
    auto* amax_out = static_cast<unsigned*>(slot_pointer(s, slots_.amax_out));
    for (const void* p : {c, bias, static_cast<const void*>(d)})
      if (p != nullptr && !aligned16(p)) {
        fallback_->run(s);
        // The next GEMM reads D's amax from here whichever kernel wrote D.
        if (amax_out != nullptr)
          launch_amax(problem_.dtype, problem_.d, d, amax_out, sm_count_, stream);
        return;
      }
    void* scratch = slot_pointer(s, slots_.scratch);
    auto* scales = static_cast<Fp8Scales*>(scratch);
    std::uint8_t* a_q = after_scales(scratch);
    if (slots_.a_amax >= 0) {  // measured by the GEMM that produced A, in its activation pass
      launch_convert_e4m3(problem_.dtype, problem_.op_a(), a, a_q,
                          static_cast<const unsigned*>(slot_pointer(s, slots_.a_amax)),
                          &scales->a_scale, sm_count_, stream);
    } else {
      launch_quantize_e4m3(problem_.dtype, problem_.op_a(), a, a_q, &scales->a_amax_bits,
                           &scales->a_scale, sm_count_, stream);
    }
    const std::uint8_t* b_q = nullptr;
    const float* b_scale = nullptr;
    if (slots_.b_prepared >= 0) {
      void* prepared = slot_pointer(s, slots_.b_prepared);
      b_q = after_scales(prepared);
      b_scale = &static_cast<const Fp8Scales*>(prepared)->b_scale;
    } else {
      std::uint8_t* b_copy = a_q + fp8_scratch_bytes(problem_, true) - kFp8ScaleBlock;
      launch_quantize_e4m3(problem_.dtype, op_b_transposed(problem_), b, b_copy,
                           &scales->b_amax_bits, &scales->b_scale, sm_count_, stream);
      b_q = b_copy;
      b_scale = &scales->b_scale;
    }
    // cuBLASLt's first operand is ge2's B (the transpose trick), its second ge2's A.
    matmul_.set_scale_pointers(b_scale, &scales->a_scale);
    matmul_.run(choice_.algo, {a_q, b_q, c, bias, d}, s.workspace, s.workspace_bytes, stream);
    if (matmul_.needs_separate_activation() && amax_out != nullptr) {
      launch_activation_amax(problem_.dtype, problem_.act, problem_.d, d, amax_out, sm_count_,
                             stream);
    } else if (matmul_.needs_separate_activation()) {
      launch_elementwise(activation_, d, nullptr, d, sm_count_, stream);
    } else if (amax_out != nullptr) {
      launch_amax(problem_.dtype, problem_.d, d, amax_out, sm_count_, stream);
    }
  }

  nlohmann::json describe() const override {
    nlohmann::json j{
        {"name", kernel_name(kernel_)},
        {"family", "cublaslt_fp8"},
        {"epilogue", matmul_.epilogue_name()},
        {"separate_activation_kernel", matmul_.needs_separate_activation()},
        {"algo", choice_.config.to_json()},
        {"algo_source", choice_.source},
        {"scales", "per-tensor, amax / 448"},
        {"a_quantized", "every execution (amax pass, convert pass)"},
        {"b_quantized",
         slots_.b_prepared >= 0 ? "once, at compile (constant weight)" : "every execution"},
        {"a_amax", slots_.a_amax >= 0 ? "from the activation pass of the GEMM that produced A"
                                      : "its own pass"},
        {"writes_amax_of_d", slots_.amax_out >= 0},
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
  GemmSlots slots_;
  int sm_count_;
  LtMatmul matmul_;
  AlgoChoice choice_;
  ElementwiseProblem activation_;
  std::unique_ptr<Step> fallback_;
};

}  // namespace

void prepare_fp8_weight(const GemmProblem& problem, const void* b, void* prepared, int sm_count) {
  const GemmProblem p = fold_batch_into_m(problem);
  auto* scales = static_cast<Fp8Scales*>(prepared);
  launch_quantize_e4m3(p.dtype, op_b_transposed(p), b, after_scales(prepared), &scales->b_amax_bits,
                       &scales->b_scale, sm_count, nullptr);
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
