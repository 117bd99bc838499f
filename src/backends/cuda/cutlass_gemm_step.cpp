// CUTLASS GEMM step: the kernel instance of the plan's kernel row, its whole
// epilogue (alpha, C with beta, bias, activation) fused. Pointers that are not
// 16-byte aligned (views at odd offsets) cannot be described to TMA; they run on
// the cuBLASLt step built beside it at compile time.
#include <fmt/format.h>

#include <cstdint>
#include <cstring>

#include "backends/cuda/cutlass/gemm_launcher.hpp"
#include "backends/cuda/gemm_steps.hpp"
#include "core/error.hpp"
#include "select/selector.hpp"

namespace ge2::cuda {

namespace cutlass_kernels {

bool same_arguments(const GemmArgs& x, const GemmArgs& y) {
  return x.m == y.m && x.n == y.n && x.k == y.k && x.batch == y.batch && x.a == y.a &&
         x.lda == y.lda && x.batch_stride_a == y.batch_stride_a && x.b == y.b && x.ldb == y.ldb &&
         x.batch_stride_b == y.batch_stride_b && x.c == y.c && x.ldc == y.ldc &&
         x.batch_stride_c == y.batch_stride_c && x.d == y.d && x.ldd == y.ldd &&
         x.batch_stride_d == y.batch_stride_d && x.bias == y.bias && x.alpha == y.alpha &&
         x.beta == y.beta && x.activation == y.activation && x.device == y.device &&
         x.sm_count == y.sm_count;
}

}  // namespace cutlass_kernels

namespace {

using cutlass_kernels::GemmArgs;
using cutlass_kernels::GemmLauncher;

// The instance behind each CUTLASS row of the kernel table.
struct CutlassInstance {
  KernelId kernel;
  std::unique_ptr<GemmLauncher> (*make)();
};
constexpr CutlassInstance kInstances[] = {
    {KernelId::CutlassF16Coop, cutlass_kernels::make_f16_cooperative_128x256},
    {KernelId::CutlassF16Pingpong, cutlass_kernels::make_f16_pingpong_64x128},
    {KernelId::CutlassF16Pingpong128, cutlass_kernels::make_f16_pingpong_128x128},
    {KernelId::CutlassBf16Coop, cutlass_kernels::make_bf16_cooperative_128x256},
    {KernelId::CutlassBf16Pingpong, cutlass_kernels::make_bf16_pingpong_64x128},
    {KernelId::CutlassBf16Pingpong128, cutlass_kernels::make_bf16_pingpong_128x128},
};
constexpr bool every_cutlass_row_has_an_instance() {
  for (const KernelInfo& row : kKernels) {
    if (row.family != KernelFamily::Cutlass) continue;
    bool found = false;
    for (const CutlassInstance& instance : kInstances) found = found || instance.kernel == row.id;
    if (!found) return false;
  }
  return true;
}
static_assert(every_cutlass_row_has_an_instance(), "a CUTLASS kernel row has no instance");

std::unique_ptr<GemmLauncher> make_launcher(KernelId kernel) {
  for (const CutlassInstance& instance : kInstances)
    if (instance.kernel == kernel) return instance.make();
  fail(GE2_ERROR_INTERNAL, "kernel '{}' is not a CUTLASS kernel", kernel_name(kernel));
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

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

class CutlassGemmStep final : public Step {
 public:
  CutlassGemmStep(const GemmProblem& problem, KernelId kernel, const GemmSlots& slots, int device,
                  int sm_count, std::unique_ptr<Step> unaligned_fallback)
      : problem_(fold_batch_into_m(problem)),
        folded_(problem_.batch != problem.batch),
        kernel_(kernel),
        slots_(slots),
        launcher_(make_launcher(kernel)),
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
    GemmArgs g = base_;
    g.a = slot_pointer(s, slots_.a);
    g.b = slot_pointer(s, slots_.b);
    g.c = problem_.has_c ? slot_pointer(s, slots_.c) : nullptr;
    g.d = slot_pointer(s, slots_.d);
    g.bias = problem_.has_bias ? slot_pointer(s, slots_.bias) : nullptr;
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
    nlohmann::json j = {
        {"name", kernel_name(kernel_)},
        {"family", "cutlass"},
        {"configuration", launcher_->configuration()},
        {"epilogue",
         fmt::format("fused: alpha*acc{}{}, {}", problem_.has_c ? " + beta*C" : "",
                     problem_.has_bias ? " + bias" : "", activation_name(problem_.act))},
        {"separate_activation_kernel", false},
        {"unaligned_pointers_run", fallback_ ? fallback_->describe().value("name", "") : ""}};
    if (folded_) j["batch_folded_into_m"] = problem_.m;
    return j;
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

}  // namespace

std::unique_ptr<Step> make_cutlass_gemm_step(const GemmProblem& problem, KernelId kernel,
                                             const GemmSlots& slots, int device, int sm_count,
                                             std::unique_ptr<Step> unaligned_fallback) {
  return std::make_unique<CutlassGemmStep>(problem, kernel, slots, device, sm_count,
                                           std::move(unaligned_fallback));
}

}  // namespace ge2::cuda
