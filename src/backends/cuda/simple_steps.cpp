// Steps that launch one of ge2's own kernels: the cuda_f32 GEMM and the
// elementwise bias/activation kernel.
#include <fmt/format.h>

#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/kernels.hpp"

namespace ge2::cuda {

namespace {

class FallbackGemmStep final : public Step {
 public:
  FallbackGemmStep(const GemmProblem& problem, const GemmSlots& slots)
      : problem_(problem), slots_(slots) {}
  void run(const ExecState& s) override {
    launch_fallback_gemm(problem_, slot_pointer(s, slots_.a), slot_pointer(s, slots_.b),
                         slot_pointer(s, slots_.c), slot_pointer(s, slots_.bias),
                         slot_pointer(s, slots_.d), static_cast<cudaStream_t>(s.stream));
  }
  nlohmann::json describe() const override {
    return {{"name", "cuda_f32"},
            {"epilogue", "fused in the kernel (C, bias, activation)"},
            {"tile", fmt::format("{}x{}x{}", kFallbackTileM, kFallbackTileN, kFallbackTileK)}};
  }

 private:
  GemmProblem problem_;
  GemmSlots slots_;
};

class ElementwiseStep final : public Step {
 public:
  ElementwiseStep(const ElementwiseProblem& problem, const ElementwiseSlots& slots, int sm_count)
      : problem_(problem), slots_(slots), sm_count_(sm_count) {}
  void run(const ExecState& s) override {
    launch_elementwise(problem_, slot_pointer(s, slots_.x), slot_pointer(s, slots_.bias),
                       slot_pointer(s, slots_.out), sm_count_, static_cast<cudaStream_t>(s.stream),
                       problem_.y_at(slot_pointer(s, slots_.y)));
  }
  nlohmann::json describe() const override { return {{"name", "cuda_elementwise"}}; }

 private:
  ElementwiseProblem problem_;
  ElementwiseSlots slots_;
  int sm_count_;
};

}  // namespace

nlohmann::json fused_kernel_description(std::string_view name, std::string_view family,
                                        const std::string& configuration,
                                        const GemmProblem& problem, bool folded,
                                        const Step* unaligned_fallback) {
  nlohmann::json j = {
      {"name", name},
      {"family", family},
      {"configuration", configuration},
      {"epilogue", fmt::format("fused: alpha*acc{}{}, {}", problem.has_c ? " + beta*C" : "",
                               problem.has_bias ? " + bias" : "", activation_name(problem.act))},
      {"separate_activation_kernel", false},
      {"unaligned_pointers_run",
       unaligned_fallback ? unaligned_fallback->describe().value("name", "") : ""}};
  if (folded) j["batch_folded_into_m"] = problem.m;
  return j;
}

std::unique_ptr<Step> make_fallback_gemm_step(const GemmProblem& problem, const GemmSlots& slots) {
  return std::make_unique<FallbackGemmStep>(problem, slots);
}

std::unique_ptr<Step> make_elementwise_step(const ElementwiseProblem& problem,
                                            const ElementwiseSlots& slots, int sm_count) {
  return std::make_unique<ElementwiseStep>(problem, slots, sm_count);
}

}  // namespace ge2::cuda
