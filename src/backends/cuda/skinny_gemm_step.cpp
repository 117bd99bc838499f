// The cuda_skinny step (decode-sized GEMMs) and its timer for the tuning mode.
#include <cstdint>

#include "backends/cuda/cuda_raii.hpp"
#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/timing_rig.hpp"
#include "core/error.hpp"
#include "select/selector.hpp"

namespace ge2::cuda {
namespace {

// The tensor-core form of one batch, K split as skinny_k_splits says for the
// device's SMs keeping `blocks_per_sm` blocks resident.
SkinnyLaunch tensor_core_launch(const GemmProblem& folded, const DeviceInfo& device,
                                int blocks_per_sm) {
  const std::int64_t slots = std::int64_t{device.sm_count} * blocks_per_sm;
  return {SkinnyForm::TensorCores,
          skinny_k_splits(folded.m, skinny_column_tiles(folded.n), (folded.k + 31) / 32, slots)};
}

}  // namespace

SkinnyLaunch skinny_launch(const GemmProblem& folded, const DeviceInfo& device,
                           int tensor_core_blocks_per_sm) {
  // One row stays on CUDA cores, which stream it at 3.4-4.4 TB/s (H200, run 11).
  if (!skinny_on_tensor_cores(folded, device)) return {SkinnyForm::CudaCores, 1};
  if (folded.batch != 1) return {SkinnyForm::TensorCores, 1};
  return tensor_core_launch(folded, device, tensor_core_blocks_per_sm);
}

namespace {

// skinny_launch with the occupancy of the current device's kernel.
SkinnyLaunch plan_launch(const GemmProblem& folded, const DeviceInfo& device) {
  return skinny_launch(
      folded, device,
      skinny_on_tensor_cores(folded, device) ? skinny_tensor_core_blocks_per_sm(folded.dtype) : 0);
}

class SkinnyGemmStep final : public Step {
 public:
  SkinnyGemmStep(const GemmProblem& problem, const GemmSlots& slots, const DeviceInfo& device,
                 std::unique_ptr<Step> unaligned_fallback)
      : problem_(skinny_problem(problem)),
        folded_(problem_.batch != problem.batch),
        slots_(slots),
        launch_(plan_launch(problem_, device)),
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
                       slot_pointer(s, slots_.d), launch_, s.workspace, s.workspace_bytes,
                       static_cast<cudaStream_t>(s.stream));
  }

  nlohmann::json describe() const override {
    return fused_kernel_description("cuda_skinny", "cuda_skinny", skinny_configuration(launch_),
                                    problem_, folded_, fallback_.get());
  }

 private:
  GemmProblem problem_;
  bool folded_;
  GemmSlots slots_;
  SkinnyLaunch launch_;
  std::unique_ptr<Step> fallback_;
};

// cuda_skinny_fp8w: the tensor-core form on the e4m3 copy of a constant weight
// that prepare_fp8_weight made at compile ([N, K] rows after their channel
// scales), A as stored.
class SkinnyFp8WeightStep final : public Step {
 public:
  SkinnyFp8WeightStep(const GemmProblem& problem, const GemmSlots& slots, const DeviceInfo& device)
      : problem_(with_prepared_fp8_weight(fold_batch_into_m(problem))),
        folded_(problem_.batch != problem.batch),
        slots_(slots) {
    std::string layout = skinny_fp8w_layout_problem(problem, device);
    if (layout.empty()) layout = fp8_layout_problem(problem);
    require(layout.empty(), GE2_ERROR_UNSUPPORTED, "cuda_skinny_fp8w: {}", layout);
    require(slots.b_prepared >= 0, GE2_ERROR_UNSUPPORTED,
            "cuda_skinny_fp8w: the plan made no e4m3 copy of B (a constant weight)");
    require(problem.a_act == Activation::None, GE2_ERROR_INTERNAL,
            "cuda_skinny_fp8w reads A as stored: it cannot apply a deferred activation");
    launch_ = tensor_core_launch(problem_, device,
                                 skinny_tensor_core_blocks_per_sm(problem_.dtype, true));
    // An A whose pointer is not 16-byte aligned is copied into this dense one (at most
    // 16 rows): the step reads no 16-bit B, so a plan may release it (Backend::
    // reads_prepared_weight_only).
    staged_problem_ = problem_;
    staged_problem_.trans_a = false;
    staged_problem_.a = {1, problem_.m, problem_.k, 0, problem_.k, 1};
    staged_a_ = DeviceBuffer(static_cast<std::size_t>(problem_.m * problem_.k) *
                             dtype_size(problem_.dtype));
  }

  void run(const ExecState& s) override {
    const void* a = slot_pointer(s, slots_.a);
    const auto stream = static_cast<cudaStream_t>(s.stream);
    // A is read as 16-byte vectors; C, bias and D element by element.
    const bool staged = !aligned16(a);
    if (staged) {
      launch_copy_matrix(problem_.dtype, problem_.op_a(), a, staged_problem_.a, staged_a_.data(),
                         stream);
      a = staged_a_.data();
    }
    const Fp8Operand weight =
        fp8_operand(slot_pointer(s, slots_.b_prepared), fp8_weight_scale_count(problem_));
    launch_skinny_gemm(staged ? staged_problem_ : problem_, a, weight.data,
                       slot_pointer(s, slots_.c), slot_pointer(s, slots_.bias),
                       slot_pointer(s, slots_.d), launch_, s.workspace, s.workspace_bytes, stream,
                       weight.scales);
  }

  nlohmann::json describe() const override {
    nlohmann::json j =
        fused_kernel_description("cuda_skinny_fp8w", "cuda_skinny_fp8",
                                 skinny_configuration(launch_, true), problem_, folded_, nullptr);
    j["unaligned_pointers_run"] = "cuda_skinny_fp8w on A copied to an aligned buffer";
    j["scales"] = !problem_.b_e4m3
                      ? "per output channel of the weight (amax / 448), applied to each sum"
                  : problem_.b_scale_block_k > 0
                      ? fmt::format(
                            "given with the weight, per block of {} output channels x {} k, "
                            "applied to each step's sum of {} k",
                            problem_.b_scale_block_n, problem_.b_scale_block_k, kSkinnyFp8StepK)
                      : "given with the weight, per output channel, applied to each sum";
    j["a_quantized"] = "no: A is read as stored (W8A16)";
    j["b_quantized"] = problem_.b_e4m3 ? "no: given in e4m3 (a quantized constant)"
                                       : "once, at compile (constant weight)";
    return j;
  }

 private:
  GemmProblem problem_;         // folded, B read from the e4m3 copy
  GemmProblem staged_problem_;  // the same reading A from staged_a_
  bool folded_;
  GemmSlots slots_;
  SkinnyLaunch launch_;
  DeviceBuffer staged_a_;
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
    const SkinnyLaunch launch = plan_launch(problem, device_);
    auto run = [&rig, problem, launch](int set) {
      const LtPointers q = rig.pointers(set, rig.output());
      launch_skinny_gemm(problem, q.a, q.b, q.c, q.bias, q.d, launch, rig.workspace(),
                         rig.workspace_bytes(), rig.stream());
    };
    return RivalKernel{kernel, false, run, {{"configuration", skinny_configuration(launch)}}};
  }

  bool row_matches(KernelId, const GemmProblem& problem,
                   const nlohmann::json& stored) const override {
    const GemmProblem folded = skinny_problem(problem);
    return stored.is_object() &&
           stored.value("configuration", "") == skinny_configuration(plan_launch(folded, device_));
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

std::unique_ptr<Step> make_skinny_fp8w_gemm_step(const GemmProblem& problem, const GemmSlots& slots,
                                                 const DeviceInfo& device) {
  return std::make_unique<SkinnyFp8WeightStep>(problem, slots, device);
}

std::unique_ptr<FamilyTimer> make_skinny_timer(const DeviceInfo& device) {
  return std::make_unique<SkinnyTimer>(device);
}

}  // namespace ge2::cuda
