// A backend creates kernels and buffers for one device kind. The CPU backend is
// always built; the CUDA backend only with GE2_WITH_CUDA.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "exec/step.hpp"
#include "ir/kernel_problems.hpp"
#include "select/device_info.hpp"
#include "select/selector.hpp"

namespace ge2 {

// Slot indices of a GEMM step's operands (-1 when absent).
struct GemmSlots {
  int a = -1, b = -1, c = -1, bias = -1, d = -1;
  // Plan-owned memory a kernel asked for: scratch (gemm_scratch_bytes) and B
  // prepared at compile (prepare_gemm_weight); -1 when the kernel needs none.
  int scratch = -1, b_prepared = -1;
};
struct ElementwiseSlots {
  int x = -1, bias = -1, out = -1, y = -1;
};

// Memory a plan owns for one intermediate value.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
};

// Whether building a GEMM step may tune it (a context in GE2_TUNE_TUNE mode, at
// compile time) or only reads what is stored: steps built during an execution
// (a dynamic plan's first run at an extent) never tune.
enum class TuneUse { AsContext, LookupOnly };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual ge2_device_kind_t kind() const = 0;
  virtual const DeviceInfo& device() const = 0;
  virtual nlohmann::json describe() const = 0;

  // Measured times from the tuning cache, for the selector; empty by default.
  virtual MeasuredTime measured_times() { return {}; }

  // The GEMM kernels this backend can build, for the selector to rank (as ggml's
  // backends answer "do you support this op?").
  virtual std::span<const KernelId> gemm_kernels() const = 0;
  // Builds the step of `kernel`, one of gemm_kernels(). `staged`: copy the
  // operands into aligned buffers first (cuBLASLt 16-bit kernels). Throws
  // GE2_ERROR_UNSUPPORTED or GE2_ERROR_CUBLAS when the kernel cannot run this
  // problem; it never builds another kernel in its place.
  virtual std::unique_ptr<Step> make_gemm(const GemmProblem& problem, const GemmSlots& slots,
                                          KernelId kernel, bool staged, TuneUse tune) = 0;
  // Device scratch a step of `kernel` needs for `problem` (the plan allocates the
  // largest once and binds it to GemmSlots::scratch); `b_prepared`: B comes from
  // prepare_gemm_weight. 0 by default.
  virtual std::size_t gemm_scratch_bytes(KernelId kernel, const GemmProblem& problem,
                                         bool b_prepared) const {
    (void)kernel, (void)problem, (void)b_prepared;
    return 0;
  }
  // B in the form `kernel` reads, made once from the constant B at `b` and
  // bias at `bias` (nullptr: none) in backend memory: the FP8 rows' e4m3 copy
  // and scale, a gated CUTLASS GEMM's interleaved weight and bias; nullptr when
  // the kernel reads B as it is. `given`: B's quantized form as the caller gave it
  // (host memory; problem.b_e4m3), which the FP8 rows' copy is made of instead of
  // quantizing the value at `b`; nullptr otherwise.
  virtual std::unique_ptr<Buffer> prepare_gemm_weight(KernelId kernel, const GemmProblem& problem,
                                                      const void* b, const void* bias,
                                                      const QuantizedData* given) {
    (void)kernel, (void)problem, (void)b, (void)bias, (void)given;
    return nullptr;
  }
  // Whether the steps of `kernel` with a prepared B read that copy only, never B's own
  // buffer (GemmSlots::b): a plan may then release a constant only they read. False
  // by default: emulating backends compute from B as stored.
  virtual bool reads_prepared_weight_only(KernelId kernel) const {
    (void)kernel;
    return false;
  }
  virtual std::unique_ptr<Step> make_elementwise(const ElementwiseProblem& problem,
                                                 const ElementwiseSlots& slots) = 0;
  virtual std::unique_ptr<Buffer> allocate(std::size_t bytes) = 0;
  // Copies `bytes` of host memory into a buffer from allocate() (constants, at compile time).
  virtual void upload(Buffer& destination, const void* host, std::size_t bytes) = 0;
  // Copies `bytes` of backend memory into host memory after the work queued on
  // the default stream (the FP8 accuracy gate, at compile time).
  virtual void download(void* host, const void* source, std::size_t bytes) = 0;
  // Refuses (GE2_ERROR_OUT_OF_MEMORY) a plan whose own buffers (intermediates
  // and constants) together cannot fit, before any is allocated; by default
  // allocation failures say so.
  virtual void check_plan_memory(std::size_t bytes) const { (void)bytes; }
  // State a plan keeps between executions; none by default. `graph_replay`: the
  // compile option of that name (backends without graphs ignore it).
  virtual std::unique_ptr<PlanDeviceState> make_plan_state(bool graph_replay) {
    (void)graph_replay;
    return nullptr;
  }

  // Runs the steps with the caller's pointers. `io_bytes[i]` is the size of slot
  // i when it is bound by the caller (0 for plan-owned slots); `io_is_output[i]`
  // says whether it is written. Backends may stage or order work here.
  virtual void execute(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
                       const std::vector<std::size_t>& io_bytes,
                       const std::vector<bool>& io_is_output) = 0;
};

// `gemm_threads`: the most threads a GEMM uses (cpu::default_gemm_threads() when 0).
std::unique_ptr<Backend> make_cpu_backend(unsigned gemm_threads = 0);
// Throws GE2_ERROR_NO_DEVICE when no usable device exists.
// `logger`: the context's diagnostics (tuning database, stale rows).
std::unique_ptr<Backend> make_cuda_backend(int device_ordinal, ge2_tune_mode_t tune_mode,
                                           const std::string& tunedb_path, const Logger& logger);
bool cuda_backend_available();  // built with CUDA and a device answers
bool cuda_backend_built();      // built with CUDA (GE2_WITH_CUDA)

}  // namespace ge2
