// The cuda_skinny step (decode-sized GEMMs) and its timer for the tuning mode.
#include <cstdint>

#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/timing_rig.hpp"
#include "core/error.hpp"
#include "select/selector.hpp"

namespace ge2::cuda {

SkinnyForm skinny_form(const GemmProblem& folded, const DeviceInfo& device) {
  // One row stays on CUDA cores, which stream it at 3.4-4.4 TB/s (H200, run 11).
  return skinny_on_tensor_cores(folded, device) ? SkinnyForm::TensorCores : SkinnyForm::CudaCores;
}

namespace {

class SkinnyGemmStep final : public Step {
 public:
  SkinnyGemmStep(const GemmProblem& problem, const GemmSlots& slots, const DeviceInfo& device,
                 std::unique_ptr<Step> unaligned_fallback)
      : problem_(skinny_problem(problem)),
        folded_(problem_.batch != problem.batch),
        slots_(slots),
        form_(skinny_form(problem_, device)),
        fallback_(std::move(unaligned_fallback)) {
    const std::string layout = skinny_layout_problem(problem, device);
    require(layout.empty(), GE2_ERROR_UNSUPPORTED, "cuda_skinny: {}", layout);
  }

  void run(const ExecState& s) override {
    const void* a = slot_pointer(s, slots_.a);
    const void* b = slot_pointer(s, slots_.b);
    // A and B are read as 16-byte vectors; C, bias and D element by element.
    if (!aligned16(a) || !aligned16(b)) {
      fallback_->run(s);
      return;
    }
    launch_skinny_gemm(problem_, a, b, slot_pointer(s, slots_.c), slot_pointer(s, slots_.bias),
                       slot_pointer(s, slots_.d), form_, static_cast<cudaStream_t>(s.stream));
  }

  nlohmann::json describe() const override {
    return fused_kernel_description("cuda_skinny", "cuda_skinny",
                                    skinny_configuration(form_, problem_.m), problem_, folded_,
                                    fallback_.get());
  }

 private:
  GemmProblem problem_;
  bool folded_;
  GemmSlots slots_;
  SkinnyForm form_;
  std::unique_ptr<Step> fallback_;
};

// Readies cuda_skinny on the tuner's rig.
class SkinnyTimer final : public FamilyTimer {
 public:
  explicit SkinnyTimer(const DeviceInfo& device) : device_(device) {}

  std::optional<RivalKernel> rival(KernelId kernel, const GemmProblem& original,
                                   TimingRig& rig) override {
    if (original.gated || !skinny_layout_problem(original, device_).empty()) return std::nullopt;
    // A folded batch reads the same memory as the rig's batched operands.
    const GemmProblem problem = skinny_problem(original);
    const SkinnyForm form = skinny_form(problem, device_);
    auto run = [&rig, problem, form](int set) {
      const LtPointers q = rig.pointers(set, rig.output());
      launch_skinny_gemm(problem, q.a, q.b, q.c, q.bias, q.d, form, rig.stream());
    };
    return RivalKernel{
        kernel, false, run, {{"configuration", skinny_configuration(form, problem.m)}}};
  }

  bool row_matches(KernelId, const GemmProblem& problem,
                   const nlohmann::json& stored) const override {
    const GemmProblem folded = skinny_problem(problem);
    return stored.is_object() && stored.value("configuration", "") ==
                                     skinny_configuration(skinny_form(folded, device_), folded.m);
  }

 private:
  DeviceInfo device_;
};

}  // namespace

std::unique_ptr<Step> make_skinny_gemm_step(const GemmProblem& problem, const GemmSlots& slots,
                                            const DeviceInfo& device,
                                            std::unique_ptr<Step> unaligned_fallback) {
  return std::make_unique<SkinnyGemmStep>(problem, slots, device, std::move(unaligned_fallback));
}

std::unique_ptr<FamilyTimer> make_skinny_timer(const DeviceInfo& device) {
  return std::make_unique<SkinnyTimer>(device);
}

}  // namespace ge2::cuda
