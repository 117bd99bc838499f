// The CUDA backend: device discovery, buffers, per-stream workspaces, execution
// ordering across streams and host-pointer staging. The steps it creates live
// in lt_gemm_step.cpp, staged_gemm_step.cpp and simple_steps.cpp.
#include <nvtx3/nvtx3.hpp>

#include <cstdint>
#include <mutex>

#include "backends/cuda/algo_choice.hpp"
#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/cuda_raii.hpp"
#include "backends/cuda/gemm_steps.hpp"
#include "backends/cuda/graph_replay.hpp"
#include "backends/cuda/workspace_pool.hpp"
#include "core/error.hpp"
#include "exec/backend.hpp"

namespace ge2 {
namespace cuda {
namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

// NVTX domain of ge2's ranges: Nsight Systems shows "ge2" executions and steps.
struct Ge2NvtxDomain {
  static constexpr const char* name{"ge2"};
};

class DeviceBufferHolder final : public Buffer {
 public:
  explicit DeviceBufferHolder(std::size_t bytes) : buffer_(bytes) {}
  void* data() override { return buffer_.data(); }

 private:
  DeviceBuffer buffer_;
};

// Orders a plan's executions across streams and remembers which bound pointers
// were already classified as device memory.
class CudaPlanState final : public PlanDeviceState {
 public:
  Event done = make_event();
  cudaStream_t last_stream = nullptr;
  bool recorded = false;
  std::vector<void*> checked;                // pointer last classified per slot
  std::vector<bool> is_host;                 // its classification
  std::unique_ptr<GraphReplayCache> replay;  // with the graph_replay compile option
  std::vector<std::string> step_labels;      // NVTX range names, built on the first execution
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int ordinal, ge2_tune_mode_t tune_mode, const std::string& tunedb_path,
              const Logger& logger)
      : ordinal_(ordinal), workspaces_(kWorkspaceBytes) {
    const DeviceGuard device_guard(ordinal);
    cudaDeviceProp props{};
    GE2_CUDA_CHECK(cudaGetDeviceProperties(&props, ordinal));
    device_.has_cuda = true;
    device_.cc_major = props.major;
    device_.cc_minor = props.minor;
    device_.sm_count = props.multiProcessorCount;
    device_.name = props.name;
    device_.cublaslt_version = cublasLtGetVersion();
    int memory_clock_khz = 0, bus_width = 0;
    (void)cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, ordinal);
    (void)cudaDeviceGetAttribute(&bus_width, cudaDevAttrGlobalMemoryBusWidth, ordinal);
    // Nominal DDR bandwidth; the selector only uses it to rank kernels.
    device_.memory_bandwidth_gbs =
        memory_clock_khz > 0 ? 2.0 * memory_clock_khz * 1e3 * (bus_width / 8.0) / 1e9 : 3000.0;
    lt_ = make_lt_handle();
    chooser_ = std::make_unique<AlgoChooser>(lt_.get(), device_, tune_mode, tunedb_path,
                                             kWorkspaceBytes, logger);
#ifdef GE2_WITH_CUTLASS
    if (cutlass_usable())
      chooser_->set_family_timer(KernelFamily::Cutlass,
                                 make_cutlass_timer(ordinal, device_.sm_count));
#endif
    chooser_->set_family_timer(KernelFamily::CudaSkinny, make_skinny_timer(device_));
  }

  ge2_device_kind_t kind() const override { return GE2_DEVICE_CUDA; }
  const DeviceInfo& device() const override { return device_; }
  nlohmann::json describe() const override {
    return {{"kind", "cuda"},
            {"device", device_.name},
            {"ordinal", ordinal_},
            {"compute_capability", fmt::format("{}.{}", device_.cc_major, device_.cc_minor)},
            {"sm_count", device_.sm_count},
            {"cublaslt_version", device_.cublaslt_version},
            {"cutlass_kernels", cutlass_usable() ? "offered (sm_90a)" : cutlass_absence()},
            {"workspace_bytes_per_stream", kWorkspaceBytes},
            {"workspaces",
             {{"streams", workspaces_.stream_count()},
              {"kept_for_captured_graphs", workspaces_.captured_count()}}},
            {"tuning", chooser_->describe()}};
  }
  MeasuredTime measured_times() override {
    // The tuning mode times kernels inside: on this context's device.
    return
        [this, measured = chooser_->measured_times()](KernelId kernel, const GemmProblem& problem) {
          const DeviceGuard device_guard(ordinal_);
          return measured(kernel, problem);
        };
  }
  // The CUTLASS kernels are sm90a code: Hopper (compute capability 9.0) only,
  // and only in builds with CUTLASS.
  std::span<const KernelId> gemm_kernels() const override {
    static constexpr auto kOffered =
        kernels_of<KernelFamily::Cublaslt, KernelFamily::CudaFallback, KernelFamily::CudaSkinny,
                   KernelFamily::CudaSkinnyFp8, KernelFamily::CublasltFp8>();
    static constexpr auto kWithCutlass =
        kernels_of<KernelFamily::Cublaslt, KernelFamily::Cutlass, KernelFamily::CudaFallback,
                   KernelFamily::CudaSkinny, KernelFamily::CudaSkinnyFp8,
                   KernelFamily::CublasltFp8>();
    if (cutlass_usable()) return kWithCutlass;
    return kOffered;
  }
  bool cutlass_usable() const {
#ifdef GE2_WITH_CUTLASS
    return device_.cc_major == 9 && device_.cc_minor == 0;
#else
    return false;
#endif
  }
  static const char* cutlass_absence() {
#ifdef GE2_WITH_CUTLASS
    return "not offered: sm_90a code needs a compute capability 9.0 device";
#else
    return "not offered: built without CUTLASS (GE2_WITH_CUTLASS=OFF)";
#endif
  }

  std::unique_ptr<Step> make_gemm(const GemmProblem& problem, const GemmSlots& slots,
                                  KernelId kernel, bool staged, TuneUse tune) override {
    const DeviceGuard device_guard(ordinal_);
    require(kernel_info(kernel).family != KernelFamily::CpuReference, GE2_ERROR_UNSUPPORTED,
            "the CUDA backend cannot run kernel '{}'", kernel_name(kernel));
    if (problem.gated) {
      const std::string refusal = gated_epilogue_problem(problem, kernel);
      require(refusal.empty(), GE2_ERROR_UNSUPPORTED, "{}", refusal);
    }
    if (is_cublaslt_fp8_kernel(kernel))
      return make_fp8_gemm_step(
          lt_.get(), problem, kernel, slots, *chooser_, device_.sm_count,
          make_lt_gemm_step(lt_.get(), without_a_activation(problem),
                            cublaslt_kernel_for(problem.dtype), slots, *chooser_, tune));
    require(problem.a_act == Activation::None, GE2_ERROR_INTERNAL,
            "kernel '{}' cannot apply a deferred activation of A", kernel_name(kernel));
    if (kernel == KernelId::CudaF32) return make_fallback_gemm_step(problem, slots);
    if (kernel == KernelId::CudaSkinnyFp8W)
      return make_skinny_fp8w_gemm_step(problem, slots, device_);
    if (kernel == KernelId::CudaSkinny)
      return make_skinny_gemm_step(
          problem, slots, device_,
          make_lt_gemm_step(lt_.get(), problem, cublaslt_kernel_for(problem.dtype), slots,
                            *chooser_, tune));
#ifdef GE2_WITH_CUTLASS
    if (is_cutlass_kernel(kernel)) {
      // A gated step has no fallback of its own: the plan keeps the unfused steps.
      return make_cutlass_gemm_step(
          problem, kernel, slots, ordinal_, device_.sm_count,
          problem.gated ? nullptr
                        : make_lt_gemm_step(lt_.get(), problem, cublaslt_kernel_for(problem.dtype),
                                            slots, *chooser_, tune));
    }
#endif
    require(!is_cutlass_kernel(kernel), GE2_ERROR_UNSUPPORTED, "{}", cutlass_absence());
    // No algorithm or an inexpressible layout throws: the plan then asks the
    // selector for its next choice (or fails, for a forced kernel).
    if (staged) return make_staged_gemm_step(lt_.get(), problem, kernel, slots, *chooser_, tune);
    return make_lt_gemm_step(lt_.get(), problem, kernel, slots, *chooser_, tune);
  }
  std::unique_ptr<Step> make_elementwise(const ElementwiseProblem& problem,
                                         const ElementwiseSlots& slots) override {
    return make_elementwise_step(problem, slots, device_.sm_count);
  }
  std::size_t gemm_scratch_bytes(KernelId kernel, const GemmProblem& problem,
                                 bool b_prepared) const override {
    return is_cublaslt_fp8_kernel(kernel) ? fp8_scratch_bytes(problem, b_prepared) : 0;
  }
  bool reads_prepared_weight_only(KernelId kernel) const override {
    return kernel == KernelId::CudaSkinnyFp8W;  // A staged when unaligned; no 16-bit fallback
  }
  std::unique_ptr<Buffer> prepare_gemm_weight(KernelId kernel, const GemmProblem& problem,
                                              const void* b, const void* bias,
                                              const QuantizedData* given) override {
#ifdef GE2_WITH_CUTLASS
    if (problem.gated && is_cutlass_kernel(kernel)) {
      const DeviceGuard device_guard(ordinal_);
      auto buffer = std::make_unique<DeviceBufferHolder>(gated_weight_bytes(problem));
      prepare_gated_weight(problem, b, bias, buffer->data());
      return buffer;
    }
#endif
    if (!is_fp8_kernel(kernel)) return nullptr;  // both FP8 families read this copy
    const DeviceGuard device_guard(ordinal_);
    auto buffer = std::make_unique<DeviceBufferHolder>(fp8_weight_bytes(problem));
    if (given)
      prepare_given_fp8_weight(problem, *given, buffer->data());
    else
      prepare_fp8_weight(problem, b, buffer->data(), device_.sm_count);
    return buffer;
  }
  void download(void* host, const void* source, std::size_t bytes) override {
    const DeviceGuard device_guard(ordinal_);
    GE2_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    GE2_CUDA_CHECK(cudaMemcpy(host, source, bytes, cudaMemcpyDeviceToHost));
  }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override {
    const DeviceGuard device_guard(ordinal_);
    return std::make_unique<DeviceBufferHolder>(bytes);
  }
  void upload(Buffer& destination, const void* host, std::size_t bytes) override {
    const DeviceGuard device_guard(ordinal_);
    GE2_CUDA_CHECK(cudaMemcpy(destination.data(), host, bytes, cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy returns once the bytes are staged, its DMA on the legacy
    // default stream maybe still running: an execution on a non-blocking stream is not
    // ordered after it.
    GE2_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  std::unique_ptr<PlanDeviceState> make_plan_state(bool graph_replay) override {
    const DeviceGuard device_guard(ordinal_);
    auto state = std::make_unique<CudaPlanState>();
    if (graph_replay) state->replay = std::make_unique<GraphReplayCache>(kWorkspaceBytes);
    return state;
  }

  void execute(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
               const std::vector<std::size_t>& io_bytes,
               const std::vector<bool>& io_is_output) override {
    const DeviceGuard device_guard(ordinal_);
    const nvtx3::scoped_range_in<Ge2NvtxDomain> range{"ge2_plan_execute"};
    auto& plan_state = static_cast<CudaPlanState&>(*state.device_state);
    if (plan_state.step_labels.size() != steps.size()) {
      plan_state.step_labels.clear();
      for (std::size_t i = 0; i < steps.size(); ++i)
        plan_state.step_labels.push_back(
            fmt::format("step {}: {}", i, steps[i]->describe().value("name", "step")));
    }
    if (classify_bound_pointers(state, io_bytes, plan_state)) {
      execute_staged(steps, state, io_bytes, io_is_output, plan_state);
      return;
    }
    run_ordered(steps, state, plan_state, /*allow_replay=*/true);
  }

 private:
  // Returns true if any bound pointer is host memory. Pointers seen in the
  // previous execution of the plan are not asked about again.
  bool classify_bound_pointers(const ExecState& state, const std::vector<std::size_t>& io_bytes,
                               CudaPlanState& ps) {
    ps.checked.resize(state.slots.size(), nullptr);
    ps.is_host.resize(state.slots.size(), false);
    bool any_host = false;
    for (std::size_t i = 0; i < state.slots.size(); ++i) {
      if (io_bytes[i] == 0) continue;  // plan-owned device buffer
      void* p = state.slots[i];
      if (ps.checked[i] != p) {
        cudaPointerAttributes attributes{};
        GE2_CUDA_CHECK(cudaPointerGetAttributes(&attributes, p));
        const bool device_accessible =
            attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
        require(!device_accessible || attributes.type == cudaMemoryTypeManaged ||
                    attributes.device == ordinal_,
                GE2_ERROR_INVALID_ARGUMENT,
                "ge2_plan_execute: a binding points to memory of CUDA device {}, the context uses "
                "device {}",
                attributes.device, ordinal_);
        ps.is_host[i] = !device_accessible;
        ps.checked[i] = p;
      }
      any_host = any_host || ps.is_host[i];
    }
    return any_host;
  }

  // `allow_replay`: with the graph_replay option, launch the plan's recorded
  // graph instead of its steps (not for staged host pointers, whose temporary
  // buffers differ every time).
  void run_ordered(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
                   CudaPlanState& ps, bool allow_replay) {
    const auto stream = static_cast<cudaStream_t>(state.stream);
    // A stream being captured into a CUDA graph runs nothing now and may not wait
    // on work outside the capture: ordering replays against eager executions is
    // the caller's, and the capture leaves the plan's ordering state untouched.
    // The steps themselves then go into the caller's graph.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    GE2_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    // Executions of one plan share its intermediates: a new stream waits for the last one.
    if (!capturing && ps.recorded && ps.last_stream != stream)
      GE2_CUDA_CHECK(cudaStreamWaitEvent(stream, ps.done.get(), 0));
    if (!capturing && allow_replay && ps.replay) {
      GE2_CUDA_CHECK(cudaGraphLaunch(ps.replay->get(steps, state), stream));
    } else {
      state.workspace =
          capturing ? workspaces_.for_capture(stream) : workspaces_.for_stream(stream);
      state.workspace_bytes = workspaces_.bytes();
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const nvtx3::scoped_range_in<Ge2NvtxDomain> step_range{ps.step_labels[i]};
        steps[i]->run(state);
      }
    }
    if (!capturing) {
      GE2_CUDA_CHECK(cudaEventRecord(ps.done.get(), stream));
      ps.last_stream = stream;
      ps.recorded = true;
    }
  }

  // Host pointers: copy through temporary device buffers, synchronously. Outputs
  // are copied in too, so that padding between their rows survives.
  void execute_staged(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
                      const std::vector<std::size_t>& io_bytes,
                      const std::vector<bool>& io_is_output, CudaPlanState& ps) {
    const auto stream = static_cast<cudaStream_t>(state.stream);
    std::vector<void*> host = state.slots;
    std::vector<DeviceBuffer> staged;
    for (std::size_t i = 0; i < state.slots.size(); ++i) {
      if (io_bytes[i] == 0 || !ps.is_host[i]) continue;
      staged.emplace_back(io_bytes[i]);
      GE2_CUDA_CHECK(cudaMemcpyAsync(staged.back().data(), host[i], io_bytes[i],
                                     cudaMemcpyHostToDevice, stream));
      state.slots[i] = staged.back().data();
    }
    run_ordered(steps, state, ps, /*allow_replay=*/false);
    for (std::size_t i = 0; i < state.slots.size(); ++i) {
      if (io_bytes[i] == 0 || !ps.is_host[i] || !io_is_output[i]) continue;
      GE2_CUDA_CHECK(
          cudaMemcpyAsync(host[i], state.slots[i], io_bytes[i], cudaMemcpyDeviceToHost, stream));
    }
    GE2_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  int ordinal_;
  DeviceInfo device_;
  LtHandle lt_;
  WorkspacePool workspaces_;
  std::unique_ptr<AlgoChooser> chooser_;
};

}  // namespace
}  // namespace cuda

bool cuda_backend_built() { return true; }

bool cuda_backend_available() {
  int count = 0;
  // Without a driver or device this fails ("driver version is insufficient", ...): no device.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device_ordinal, ge2_tune_mode_t tune_mode,
                                           const std::string& tunedb_path, const Logger& logger) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail(GE2_ERROR_NO_DEVICE,
         "ge2_context_create: no usable CUDA device: cudaGetDeviceCount failed: {} ({})",
         cudaGetErrorName(status), cudaGetErrorString(status));
  }
  require(count > 0, GE2_ERROR_NO_DEVICE, "ge2_context_create: no CUDA device is visible");
  require(device_ordinal < count, GE2_ERROR_NO_DEVICE,
          "ge2_context_create: argument 'options->device_ordinal' = {} but only {} CUDA device(s) "
          "exist",
          device_ordinal, count);
  return std::make_unique<cuda::CudaBackend>(device_ordinal, tune_mode, tunedb_path, logger);
}

}  // namespace ge2
