// CUTLASS GEMM step: the kernel instance of the plan's kernel row, its whole
// epilogue (alpha, C with beta, bias, activation) fused. Pointers that are not
// 16-byte aligned (views at odd offsets) cannot be described to TMA; they run on
// the cuBLASLt step built beside it at compile time.
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <optional>

#include "backends/cuda/cutlass/gemm_launcher.hpp"
#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/timing_rig.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "select/selector.hpp"

namespace ge2::cuda {

namespace {

using cutlass_kernels::GemmArgs;
using cutlass_kernels::GemmLauncher;

// The instances behind the CUTLASS rows of the kernel table: for each row one
// that takes the activation at run time and, where measured to pay
// (bench/cutlass_epilogue_probe), instances with one activation compiled in.
struct CutlassInstance {
  KernelId kernel;
  std::optional<Activation> compiled;  // empty: the activation is a kernel argument
  std::unique_ptr<GemmLauncher> (*make)();
};
namespace k = cutlass_kernels;
constexpr CutlassInstance kInstances[] = {
    {KernelId::CutlassF16Coop, std::nullopt, k::make_f16_cooperative_128x256},
    {KernelId::CutlassF16Pingpong, std::nullopt, k::make_f16_pingpong_64x128},
    {KernelId::CutlassF16Pingpong128, std::nullopt, k::make_f16_pingpong_128x128},
    {KernelId::CutlassF16Pingpong128, Activation::GeluErf, k::make_f16_pingpong_128x128_gelu_erf},
    {KernelId::CutlassF16Pingpong128, Activation::Silu, k::make_f16_pingpong_128x128_silu},
    {KernelId::CutlassBf16Coop, std::nullopt, k::make_bf16_cooperative_128x256},
    {KernelId::CutlassBf16Pingpong, std::nullopt, k::make_bf16_pingpong_64x128},
    {KernelId::CutlassBf16Pingpong128, std::nullopt, k::make_bf16_pingpong_128x128},
    {KernelId::CutlassBf16Pingpong128, Activation::GeluErf, k::make_bf16_pingpong_128x128_gelu_erf},
    {KernelId::CutlassBf16Pingpong128, Activation::Silu, k::make_bf16_pingpong_128x128_silu},
};
constexpr bool every_cutlass_row_has_a_runtime_instance() {
  for (const KernelInfo& row : kKernels) {
    if (row.family != KernelFamily::Cutlass) continue;
    bool found = false;
    for (const CutlassInstance& instance : kInstances)
      found = found || (instance.kernel == row.id && !instance.compiled);
    if (!found) return false;
  }
  return true;
}
static_assert(every_cutlass_row_has_a_runtime_instance(),
              "a CUTLASS kernel row has no run-time-activation instance");

// The instance of `kernel` with `act` compiled in, else its run-time one.
std::unique_ptr<GemmLauncher> make_launcher(KernelId kernel, Activation act) {
  const CutlassInstance* runtime = nullptr;
  for (const CutlassInstance& instance : kInstances) {
    if (instance.kernel != kernel) continue;
    if (instance.compiled == act) return instance.make();
    if (!instance.compiled) runtime = &instance;
  }
  require(runtime != nullptr, GE2_ERROR_INTERNAL, "kernel '{}' is not a CUTLASS kernel",
          kernel_name(kernel));
  return runtime->make();
}

// Shapes, strides and epilogue of the problem; pointers are filled in per run.
GemmArgs base_arguments(const GemmProblem& p, int device, int sm_count) {
  const MatrixView a = p.op_a(), b = p.op_b();
  GemmArgs g;
  g.m = static_cast<int>(p.m);
  g.n = static_cast<int>(p.n);
  g.k = static_cast<int>(p.k);
  g.batch = static_cast<int>(p.batch);
  g.lda = a.row_stride;
  g.batch_stride_a = p.a.batch_stride;
  g.ldb = b.col_stride;
  g.batch_stride_b = p.b.batch_stride;
  g.ldc = p.has_c ? p.c.row_stride : 0;
  g.batch_stride_c = p.has_c ? p.c.batch_stride : 0;
  g.ldd = p.d.row_stride;
  g.batch_stride_d = p.d.batch_stride;
  g.alpha = p.alpha;
  g.beta = p.has_c ? p.beta : 0.0f;
  g.activation = static_cast<int>(p.act);
  g.device = device;
  g.sm_count = sm_count;
  return g;
}

// `base` with this execution's pointers; C and the bias only where the problem has them.
GemmArgs with_pointers(GemmArgs base, const GemmProblem& p, const LtPointers& pointers) {
  base.a = pointers.a;
  base.b = pointers.b;
  base.c = p.has_c ? pointers.c : nullptr;
  base.d = pointers.d;
  base.bias = p.has_bias ? pointers.bias : nullptr;
  return base;
}

class CutlassGemmStep final : public Step {
 public:
  CutlassGemmStep(const GemmProblem& problem, KernelId kernel, const GemmSlots& slots, int device,
                  int sm_count, std::unique_ptr<Step> unaligned_fallback)
      : problem_(fold_batch_into_m(problem)),
        folded_(problem_.batch != problem.batch),
        kernel_(kernel),
        slots_(slots),
        launcher_(make_launcher(kernel, problem.act)),
        fallback_(std::move(unaligned_fallback)) {
    const std::string layout = cutlass_layout_problem(problem_);
    require(layout.empty(), GE2_ERROR_UNSUPPORTED, "{}", layout);
    base_ = base_arguments(problem_, device, sm_count);
    // CUTLASS's own shape and stride rules, with stand-in aligned pointers.
    GemmArgs probe = base_;
    char* aligned = reinterpret_cast<char*>(std::uintptr_t{256});
    probe.a = probe.b = probe.c = probe.d = aligned;
    probe.bias = problem_.has_bias ? aligned : nullptr;
    const std::string refusal = launcher_->check(probe);
    require(refusal.empty(), GE2_ERROR_UNSUPPORTED, "{}", refusal);
  }

  void run(const ExecState& s) override {
    const GemmArgs g = with_pointers(
        base_, problem_,
        {slot_pointer(s, slots_.a), slot_pointer(s, slots_.b), slot_pointer(s, slots_.c),
         slot_pointer(s, slots_.bias), slot_pointer(s, slots_.d)});
    for (const void* p : {g.a, g.b, g.c, static_cast<const void*>(g.d), g.bias})
      if (p != nullptr && !aligned16(p)) {
        fallback_->run(s);
        return;
      }
    const std::string failure =
        launcher_->launch(g, s.workspace, s.workspace_bytes, static_cast<cudaStream_t>(s.stream));
    require(failure.empty(), GE2_ERROR_CUDA, "{} ({}): {}", kernel_name(kernel_),
            launcher_->configuration(), failure);
  }

  nlohmann::json describe() const override {
    return fused_kernel_description(kernel_name(kernel_), "cutlass", launcher_->configuration(),
                                    problem_, folded_, fallback_.get());
  }

 private:
  GemmProblem problem_;
  bool folded_;
  KernelId kernel_;
  GemmSlots slots_;
  std::unique_ptr<GemmLauncher> launcher_;
  std::unique_ptr<Step> fallback_;
  GemmArgs base_;
};

// Times CUTLASS rows for the tuning mode on the tuner's rig, after checking
// each against cuda_f32 on the same operands.
class CutlassTimer final : public FamilyTimer {
 public:
  CutlassTimer(int device, int sm_count, int l2_bytes, std::size_t workspace_bytes,
               const Logger& logger)
      : device_(device),
        sm_count_(sm_count),
        l2_bytes_(l2_bytes),
        workspace_(workspace_bytes),
        logger_(logger) {}

  std::optional<TimedKernel> time(KernelId kernel, const GemmProblem& original) override {
    const GemmProblem problem = fold_batch_into_m(original);
    if (!cutlass_layout_problem(problem).empty()) return std::nullopt;
    const std::unique_ptr<GemmLauncher> launcher = make_launcher(kernel, problem.act);
    const GemmArgs base = base_arguments(problem, device_, sm_count_);
    TimingRig rig(problem, l2_bytes_, workspace_);
    auto arguments = [&](int set, void* d) {
      return with_pointers(base, problem, rig.pointers(set, d));
    };
    if (!launcher->check(arguments(0, rig.output())).empty()) return std::nullopt;
    auto run = [&](int set) {
      const std::string failure = launcher->launch(arguments(set, rig.output()), rig.workspace(),
                                                   rig.workspace_bytes(), rig.stream());
      require(failure.empty(), GE2_ERROR_CUDA, "tuning {} ({}): {}", kernel_name(kernel),
              launcher->configuration(), failure);
    };
    rig.clear(rig.reference());
    const LtPointers r = rig.pointers(0, rig.reference());
    launch_fallback_gemm(problem, r.a, r.b, r.c, r.bias, r.d, rig.stream());
    rig.clear(rig.output());
    run(0);
    const double bound = agreement_bound(problem.dtype, false);
    const double difference = rig.difference_from_reference();
    if (!(difference <= bound)) {
      logger_(
          LogLevel::Warning,
          "tuning: {} disagrees with cuda_f32 on GEMM {} (relative difference {:.3g}); not timed",
          kernel_name(kernel), problem.shape_string(), difference);
      return std::nullopt;
    }
    return TimedKernel{rig.median_us(run), {{"configuration", launcher->configuration()}}};
  }

  bool row_matches(KernelId kernel, const GemmProblem& problem,
                   const nlohmann::json& stored) const override {
    return stored.is_object() &&
           stored.value("configuration", "") == make_launcher(kernel, problem.act)->configuration();
  }

 private:
  int device_, sm_count_, l2_bytes_;
  std::size_t workspace_;
  Logger logger_;
};

}  // namespace

std::unique_ptr<FamilyTimer> make_cutlass_timer(int device, int sm_count, int l2_bytes,
                                                std::size_t workspace_bytes, const Logger& logger) {
  return std::make_unique<CutlassTimer>(device, sm_count, l2_bytes, workspace_bytes, logger);
}

std::unique_ptr<Step> make_cutlass_gemm_step(const GemmProblem& problem, KernelId kernel,
                                             const GemmSlots& slots, int device, int sm_count,
                                             std::unique_ptr<Step> unaligned_fallback) {
  return std::make_unique<CutlassGemmStep>(problem, kernel, slots, device, sm_count,
                                           std::move(unaligned_fallback));
}

}  // namespace ge2::cuda
