// The CPU reference backend: host pointers, synchronous, every op and dtype.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "exec/backend.hpp"

namespace ge2 {
namespace {

class CpuGemmStep final : public Step {
 public:
  CpuGemmStep(const GemmProblem& problem, const GemmSlots& slots, KernelId kernel, unsigned threads)
      : problem_(problem), slots_(slots), kernel_(kernel), threads_(threads) {}
  void run(const ExecState& s) override {
    (kernel_ == KernelId::CpuFp8Ref ? cpu::gemm_fp8 : cpu::gemm)(
        problem_, slot_pointer(s, slots_.a), slot_pointer(s, slots_.b), slot_pointer(s, slots_.c),
        slot_pointer(s, slots_.bias), slot_pointer(s, slots_.d), threads_);
  }
  nlohmann::json describe() const override {
    nlohmann::json j{{"name", kernel_name(kernel_)},
                     {"epilogue", problem_.gated ? "act(gate) * up, in the reference loop"
                                                 : "fused in the reference loop"}};
    if (kernel_ == KernelId::CpuFp8Ref)
      j["scales"] = "row-wise, amax / 448: one per row of A and per output channel of B";
    if (problem_.a_act != Activation::None)
      j["a_activation"] = std::string(activation_name(problem_.a_act));
    return j;
  }

 private:
  GemmProblem problem_;
  GemmSlots slots_;
  KernelId kernel_;
  unsigned threads_;
};

class CpuElementwiseStep final : public Step {
 public:
  CpuElementwiseStep(const ElementwiseProblem& problem, const ElementwiseSlots& slots)
      : problem_(problem), slots_(slots) {}
  void run(const ExecState& s) override {
    cpu::elementwise(problem_, slot_pointer(s, slots_.x), slot_pointer(s, slots_.bias),
                     problem_.y_at(slot_pointer(s, slots_.y)), slot_pointer(s, slots_.out));
  }
  nlohmann::json describe() const override { return {{"name", "cpu_elementwise"}}; }

 private:
  ElementwiseProblem problem_;
  ElementwiseSlots slots_;
};

// Host memory for an intermediate value.
class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(std::size_t bytes) {
    require_fits_in_host_memory(bytes, "ge2_plan_compile: an intermediate buffer");
    storage_ = std::make_unique_for_overwrite<Block[]>((bytes + 15) / 16);
  }
  void* data() override { return storage_.get(); }

 private:
  struct alignas(16) Block {
    unsigned char bytes[16];
  };
  std::unique_ptr<Block[]> storage_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(unsigned gemm_threads)
      : gemm_threads_(gemm_threads > 0 ? gemm_threads : cpu::default_gemm_threads()),
        threads_from_environment_(gemm_threads > 0) {}
  ge2_device_kind_t kind() const override { return GE2_DEVICE_CPU; }
  const DeviceInfo& device() const override { return device_; }
  nlohmann::json describe() const override {
    return {{"kind", "cpu"},
            {"device", "host (reference backend)"},
            {"gemm_threads", gemm_threads_},
            {"gemm_threads_from",
             threads_from_environment_ ? "$GE2_CPU_THREADS" : "usable CPUs, at most 16"}};
  }

  std::span<const KernelId> gemm_kernels() const override {
    static constexpr auto kOffered = kernels_of<KernelFamily::CpuReference>();
    return kOffered;
  }
  std::unique_ptr<Step> make_gemm(const GemmProblem& problem, const GemmSlots& slots,
                                  KernelId kernel, bool, TuneUse) override {
    require(kernel_info(kernel).family == KernelFamily::CpuReference, GE2_ERROR_UNSUPPORTED,
            "the CPU backend cannot run kernel '{}'", kernel_name(kernel));
    if (problem.gated) {
      const std::string refusal = gated_epilogue_problem(problem, kernel);
      require(refusal.empty(), GE2_ERROR_UNSUPPORTED, "{}", refusal);
    }
    if (kernel == KernelId::CpuFp8Ref) {
      const std::string layout = fp8_layout_problem(problem);
      require(layout.empty(), GE2_ERROR_UNSUPPORTED, "{}", layout);
    }
    require(problem.a_act == Activation::None || kernel == KernelId::CpuFp8Ref, GE2_ERROR_INTERNAL,
            "kernel '{}' cannot apply a deferred activation of A", kernel_name(kernel));
    return std::make_unique<CpuGemmStep>(problem, slots, kernel, gemm_threads_);
  }
  std::unique_ptr<Step> make_elementwise(const ElementwiseProblem& problem,
                                         const ElementwiseSlots& slots) override {
    return std::make_unique<CpuElementwiseStep>(problem, slots);
  }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override {
    return std::make_unique<HostBuffer>(bytes);
  }
  void upload(Buffer& destination, const void* host, std::size_t bytes) override {
    std::memcpy(destination.data(), host, bytes);
  }
  void download(void* host, const void* source, std::size_t bytes) override {
    std::memcpy(host, source, bytes);
  }
  void check_plan_memory(std::size_t bytes) const override {
    require_fits_in_host_memory(
        bytes, "ge2_plan_compile: the plan's intermediate buffers and constants together");
  }
  void execute(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
               const std::vector<std::size_t>&, const std::vector<bool>&) override {
    require(state.stream == nullptr, GE2_ERROR_INVALID_ARGUMENT,
            "ge2_plan_execute: argument 'stream' = {} must be NULL on the CPU backend",
            state.stream);
    for (const auto& step : steps) step->run(state);
  }

 private:
  DeviceInfo device_{};
  unsigned gemm_threads_;
  bool threads_from_environment_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(unsigned gemm_threads) {
  return std::make_unique<CpuBackend>(gemm_threads);
}

}  // namespace ge2
