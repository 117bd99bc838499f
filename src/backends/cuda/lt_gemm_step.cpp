// cuBLASLt GEMM step: descriptors and algorithm fixed at compile time; an
// execution sets the bias pointer and calls cublasLtMatmul.
#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "core/error.hpp"

namespace ge2::cuda {
namespace {

std::uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t alignment = 256;
  while (alignment > 1 && (address % alignment) != 0) alignment /= 2;
  return alignment;
}

class LtGemmStep final : public Step {
 public:
  LtGemmStep(cublasLtHandle_t handle, const GemmProblem& problem, KernelId kernel,
             const GemmSlots& slots, AlgoChooser& chooser, TuneUse tune)
      : matmul_(handle, problem, kernel), slots_(slots), chooser_(chooser) {
    choice_ = chooser.choose(matmul_, tune);
    if (matmul_.needs_separate_activation()) activation_ = matmul_.activation_pass();
  }

  void run(const ExecState& s) override {
    const LtPointers pointers{slot_pointer(s, slots_.a), slot_pointer(s, slots_.b),
                              slot_pointer(s, slots_.c), slot_pointer(s, slots_.bias),
                              slot_pointer(s, slots_.d)};
    const auto stream = static_cast<cudaStream_t>(s.stream);
    const std::uint32_t alignment = alignment_of(pointers);
    if (alignment >= 16) {
      matmul_.run(choice_.algo, pointers, s.workspace, s.workspace_bytes, stream);
    } else if (!run_unaligned(alignment, pointers, s)) {
      return;  // ran on cuda_f32
    }
    if (matmul_.needs_separate_activation())
      launch_elementwise(activation_, pointers.d, nullptr, pointers.d, chooser_.sm_count(), stream);
  }

  nlohmann::json describe() const override {
    return {{"name", kernel_name(matmul_.kernel())},
            {"epilogue", matmul_.epilogue_name()},
            {"separate_activation_kernel", matmul_.needs_separate_activation()},
            {"algo", choice_.config.to_json()},
            {"algo_source", choice_.source},
            {"workspace_bytes", choice_.workspace_bytes},
            {"transpose_trick", "D^T = op(B)^T * op(A)^T, column-major"}};
  }

 private:
  static std::uint32_t alignment_of(const LtPointers& p) {
    std::uint32_t alignment = 256;
    for (const void* q : {p.a, p.b, p.c, p.bias, static_cast<const void*>(p.d)})
      if (q != nullptr) alignment = std::min(alignment, pointer_alignment(q));
    return alignment;
  }

  // The compiled algorithm assumes 16-byte-aligned pointers (cudaMalloc gives
  // 256). Views at odd offsets get an algorithm chosen for their alignment once.
  // Where cuBLASLt has none, or refuses the pointers at the call (seen for a bf16
  // bias at a 2-byte offset: CUBLAS_STATUS_NOT_SUPPORTED, nothing enqueued), that
  // alignment runs on the cuda_f32 kernel from then on. Returns whether cuBLASLt ran.
  bool run_unaligned(std::uint32_t alignment, const LtPointers& pointers, const ExecState& s) {
    const AlgoChoice* choice = nullptr;
    {
      std::lock_guard lock(unaligned_mutex_);
      auto& slot = unaligned_choices_[alignment];
      if (!slot && !cublaslt_refuses_.contains(alignment)) {
        try {
          slot = std::make_unique<AlgoChoice>(chooser_.heuristic(matmul_, alignment));
        } catch (const Error&) {
          cublaslt_refuses_.insert(alignment);
        }
      }
      choice = slot.get();
    }
    if (choice != nullptr) {
      try {
        matmul_.run(choice->algo, pointers, s.workspace, s.workspace_bytes,
                    static_cast<cudaStream_t>(s.stream));
        return true;
      } catch (const Error& e) {
        if (e.status() != GE2_ERROR_CUBLAS) throw;
        std::lock_guard lock(unaligned_mutex_);
        cublaslt_refuses_.insert(alignment);
        unaligned_choices_.erase(alignment);
      }
    }
    std::call_once(fallback_once_,
                   [&] { fallback_ = make_fallback_gemm_step(matmul_.problem(), slots_); });
    fallback_->run(s);
    return false;
  }

  LtMatmul matmul_;
  GemmSlots slots_;
  AlgoChooser& chooser_;
  AlgoChoice choice_;
  ElementwiseProblem activation_;
  std::mutex unaligned_mutex_;
  std::map<std::uint32_t, std::unique_ptr<AlgoChoice>> unaligned_choices_;
  std::set<std::uint32_t> cublaslt_refuses_;
  std::once_flag fallback_once_;
  std::unique_ptr<Step> fallback_;
};

}  // namespace

std::unique_ptr<Step> make_lt_gemm_step(cublasLtHandle_t handle, const GemmProblem& problem,
                                        KernelId kernel, const GemmSlots& slots,
                                        AlgoChooser& chooser, TuneUse tune) {
  return std::make_unique<LtGemmStep>(handle, problem, kernel, slots, chooser, tune);
}

}  // namespace ge2::cuda
