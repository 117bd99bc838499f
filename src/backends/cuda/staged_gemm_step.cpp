// Staged cuBLASLt GEMM step for unaligned 16-bit problems.
#include <fmt/format.h>

#include "backends/cuda/cuda_raii.hpp"
#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "select/selector.hpp"

namespace ge2::cuda {
namespace {

// Unaligned 16-bit problems: op(A), op(B) (and C, bias) are copied into
// zero-padded buffers whose leading dimensions are multiples of 16 bytes, the
// fast aligned kernel runs, and D is copied back. Zero padding of K is exact.
class StagedLtGemmStep final : public Step {
 public:
  StagedLtGemmStep(cublasLtHandle_t handle, const GemmProblem& problem, KernelId kernel,
                   const GemmSlots& slots, AlgoChooser& chooser, TuneUse tune)
      : original_(problem),
        padded_(staged_problem(problem)),
        // op(A) and op(B) are read through their strides, so transposes are normalised too.
        op_a_(problem.op_a()),
        op_b_(problem.op_b()),
        matmul_(handle, padded_, kernel),
        slots_(slots) {
    choice_ = chooser.choose(matmul_, tune);
    const std::size_t e = dtype_size(problem.dtype);
    auto span = [&](const MatrixView& v) {
      return static_cast<std::size_t>((v.batch_stride == 0 ? 1 : v.batch) * v.rows * v.cols) * e;
    };
    a_ = DeviceBuffer(span(padded_.a));
    b_ = DeviceBuffer(span(padded_.b));
    d_ = DeviceBuffer(span(padded_.d));
    if (problem.has_bias) bias_ = DeviceBuffer(static_cast<std::size_t>(padded_.n) * e);
  }

  void run(const ExecState& s) override {
    const auto stream = static_cast<cudaStream_t>(s.stream);
    const GemmProblem& p = original_;
    const DType t = p.dtype;
    launch_copy_matrix(t, op_a_, slot_pointer(s, slots_.a), batch_of(padded_.a), a_.data(), stream);
    launch_copy_matrix(t, op_b_, slot_pointer(s, slots_.b), batch_of(padded_.b), b_.data(), stream);
    if (p.has_bias) {
      const MatrixView bias_src{1, 1, p.n, 0, 0, p.bias_stride},
          bias_dst{1, 1, padded_.n, 0, padded_.n, 1};
      launch_copy_matrix(t, bias_src, slot_pointer(s, slots_.bias), bias_dst, bias_.data(), stream);
    }
    if (p.has_c)
      launch_copy_matrix(t, p.c, slot_pointer(s, slots_.c), padded_.d, d_.data(), stream);
    const LtPointers pointers{a_.data(), b_.data(), p.has_c ? d_.data() : nullptr, bias_.data(),
                              d_.data()};
    matmul_.run(choice_.algo, pointers, s.workspace, s.workspace_bytes, stream);
    // An activation the epilogue cannot do (erf GELU) is applied by the copy back.
    const MatrixView result{p.batch, p.m, p.n, padded_.d.batch_stride, padded_.d.row_stride, 1};
    launch_copy_matrix(t, result, d_.data(), p.d, slot_pointer(s, slots_.d), stream,
                       matmul_.needs_separate_activation() ? p.act : Activation::None);
  }

  nlohmann::json describe() const override {
    return {{"name", kernel_name(matmul_.kernel())},
            {"staged", true},
            {"staged_problem",
             fmt::format("{}x{}x{} (K, N padded to 16 bytes)", padded_.m, padded_.n, padded_.k)},
            {"staging_bytes", staging_bytes(original_)},
            {"epilogue", matmul_.epilogue_name()},
            {"separate_activation_kernel", false},
            {"activation_in_copy_back", matmul_.needs_separate_activation()},
            {"algo", choice_.config.to_json()},
            {"algo_source", choice_.source},
            {"workspace_bytes", choice_.workspace_bytes}};
  }

 private:
  // A padded operand shared by the batch is copied once (batch 1, stride 0).
  static MatrixView batch_of(const MatrixView& v) {
    MatrixView copy = v;
    if (copy.batch_stride == 0) copy.batch = 1;
    return copy;
  }

  GemmProblem original_, padded_;
  MatrixView op_a_, op_b_;
  LtMatmul matmul_;
  GemmSlots slots_;
  AlgoChoice choice_;
  DeviceBuffer a_, b_, d_, bias_;
};

}  // namespace

std::unique_ptr<Step> make_staged_gemm_step(cublasLtHandle_t handle, const GemmProblem& problem,
                                            KernelId kernel, const GemmSlots& slots,
                                            AlgoChooser& chooser, TuneUse tune) {
  return std::make_unique<StagedLtGemmStep>(handle, problem, kernel, slots, chooser, tune);
}

}  // namespace ge2::cuda
