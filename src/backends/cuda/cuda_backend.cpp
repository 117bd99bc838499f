// The CUDA backend: cuBLASLt and fallback GEMM steps, elementwise steps, device
// buffers, per-stream workspaces, execution ordering and host-pointer staging.
#include <cstdint>
#include <map>
#include <mutex>

#include "backends/cuda/algo_choice.hpp"
#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/cuda_raii.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "backends/cuda/workspace_pool.hpp"
#include "core/error.hpp"
#include "exec/backend.hpp"
#include "select/selector.hpp"

namespace ge2 {
namespace cuda {
namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

void* slot_pointer(const ExecState& state, int slot) {
  return slot < 0 ? nullptr : state.slots[static_cast<std::size_t>(slot)];
}

std::uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t alignment = 256;
  while (alignment > 1 && (address % alignment) != 0) alignment /= 2;
  return alignment;
}

class LtGemmStep final : public Step {
 public:
  LtGemmStep(cublasLtHandle_t handle, const GemmProblem& problem, KernelId kernel,
             const GemmSlots& slots, AlgoChooser& chooser)
      : matmul_(handle, problem, kernel), slots_(slots), chooser_(chooser) {
    choice_ = chooser.choose(matmul_);
    if (matmul_.needs_separate_activation()) {
      activation_.x = TensorType::dense(problem.dtype, 3, {problem.batch, problem.m, problem.n});
      activation_.x.strides = {problem.d.batch_stride, problem.d.row_stride, problem.d.col_stride};
      activation_.out = activation_.x;
      activation_.act = problem.act;
    }
  }

  void run(const ExecState& s) override {
    const LtPointers pointers{slot_pointer(s, slots_.a), slot_pointer(s, slots_.b),
                              slot_pointer(s, slots_.c), slot_pointer(s, slots_.bias),
                              slot_pointer(s, slots_.d)};
    const auto stream = static_cast<cudaStream_t>(s.stream);
    const AlgoChoice& choice = choice_for(pointers);
    matmul_.run(choice.algo, pointers, s.workspace, s.workspace_bytes, stream);
    if (matmul_.needs_separate_activation())
      launch_elementwise(activation_, pointers.d, nullptr, pointers.d, stream);
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
  // The compiled algorithm assumes 16-byte-aligned pointers (cudaMalloc gives
  // 256). Views at odd offsets get an algorithm chosen for their alignment once.
  const AlgoChoice& choice_for(const LtPointers& p) {
    std::uint32_t alignment = 256;
    for (const void* q : {p.a, p.b, p.c, static_cast<const void*>(p.d)})
      if (q != nullptr) alignment = std::min(alignment, pointer_alignment(q));
    if (alignment >= 16) return choice_;
    std::lock_guard lock(unaligned_mutex_);
    auto& slot = unaligned_choices_[alignment];
    if (!slot)
      slot = std::make_unique<AlgoChoice>(chooser_.heuristic_for_alignment(matmul_, alignment));
    return *slot;
  }

  LtMatmul matmul_;
  GemmSlots slots_;
  AlgoChooser& chooser_;
  AlgoChoice choice_;
  ElementwiseProblem activation_;
  std::mutex unaligned_mutex_;
  std::map<std::uint32_t, std::unique_ptr<AlgoChoice>> unaligned_choices_;
};

// Unaligned 16-bit problems: op(A), op(B) (and C, bias) are copied into
// zero-padded buffers whose leading dimensions are multiples of 16 bytes, the
// fast aligned kernel runs, and D is copied back. Zero padding of K is exact.
class StagedLtGemmStep final : public Step {
 public:
  StagedLtGemmStep(cublasLtHandle_t handle, const GemmProblem& problem, KernelId kernel,
                   const GemmSlots& slots, AlgoChooser& chooser)
      : original_(problem),
        padded_(staged_problem(problem)),
        matmul_(handle, padded_, kernel),
        slots_(slots) {
    choice_ = chooser.choose(matmul_);
    const std::size_t e = dtype_size(problem.dtype);
    auto span = [&](const MatrixView& v) {
      return static_cast<std::size_t>((v.batch_stride == 0 ? 1 : v.batch) * v.rows * v.cols) * e;
    };
    a_ = DeviceBuffer(span(padded_.a));
    b_ = DeviceBuffer(span(padded_.b));
    d_ = DeviceBuffer(span(padded_.d));
    if (problem.has_bias) bias_ = DeviceBuffer(static_cast<std::size_t>(padded_.n) * e);
    if (matmul_.needs_separate_activation()) {
      activation_.x = TensorType::dense(problem.dtype, 3, {padded_.batch, padded_.m, padded_.n});
      activation_.out = activation_.x;
      activation_.act = problem.act;
    }
  }

  void run(const ExecState& s) override {
    const auto stream = static_cast<cudaStream_t>(s.stream);
    const GemmProblem& p = original_;
    const DType t = p.dtype;
    // op(A) and op(B) read through their strides, so transposes are normalised too.
    const MatrixView op_a{p.batch,
                          p.m,
                          p.k,
                          p.a.batch_stride,
                          p.trans_a ? p.a.col_stride : p.a.row_stride,
                          p.trans_a ? p.a.row_stride : p.a.col_stride};
    const MatrixView op_b{p.batch,
                          p.k,
                          p.n,
                          p.b.batch_stride,
                          p.trans_b ? p.b.col_stride : p.b.row_stride,
                          p.trans_b ? p.b.row_stride : p.b.col_stride};
    launch_copy_matrix(t, op_a, slot_pointer(s, slots_.a), batch_of(padded_.a), a_.data(), stream);
    launch_copy_matrix(t, op_b, slot_pointer(s, slots_.b), batch_of(padded_.b), b_.data(), stream);
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
    if (matmul_.needs_separate_activation())
      launch_elementwise(activation_, d_.data(), nullptr, d_.data(), stream);
    const MatrixView result{p.batch, p.m, p.n, padded_.d.batch_stride, padded_.d.row_stride, 1};
    launch_copy_matrix(t, result, d_.data(), p.d, slot_pointer(s, slots_.d), stream);
  }

  nlohmann::json describe() const override {
    return {{"name", kernel_name(matmul_.kernel())},
            {"staged", true},
            {"staged_problem",
             fmt::format("{}x{}x{} (K, N padded to 16 bytes)", padded_.m, padded_.n, padded_.k)},
            {"staging_bytes", staging_bytes(original_)},
            {"epilogue", matmul_.epilogue_name()},
            {"separate_activation_kernel", matmul_.needs_separate_activation()},
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
  LtMatmul matmul_;
  GemmSlots slots_;
  AlgoChoice choice_;
  ElementwiseProblem activation_;
  DeviceBuffer a_, b_, d_, bias_;
};

class FallbackGemmStep final : public Step {
 public:
  FallbackGemmStep(const GemmProblem& problem, const GemmSlots& slots, std::string fallback_reason)
      : problem_(problem), slots_(slots), reason_(std::move(fallback_reason)) {}
  void run(const ExecState& s) override {
    launch_fallback_gemm(problem_, slot_pointer(s, slots_.a), slot_pointer(s, slots_.b),
                         slot_pointer(s, slots_.c), slot_pointer(s, slots_.bias),
                         slot_pointer(s, slots_.d), static_cast<cudaStream_t>(s.stream));
  }
  nlohmann::json describe() const override {
    nlohmann::json j{
        {"name", "cuda_f32"},
        {"epilogue", "fused in the kernel (C, bias, activation)"},
        {"tile", fmt::format("{}x{}x{}", kFallbackTileM, kFallbackTileN, kFallbackTileK)}};
    if (!reason_.empty()) j["fallback_reason"] = reason_;
    return j;
  }

 private:
  GemmProblem problem_;
  GemmSlots slots_;
  std::string reason_;
};

class ElementwiseStep final : public Step {
 public:
  ElementwiseStep(const ElementwiseProblem& problem, const ElementwiseSlots& slots)
      : problem_(problem), slots_(slots) {}
  void run(const ExecState& s) override {
    launch_elementwise(problem_, slot_pointer(s, slots_.x), slot_pointer(s, slots_.bias),
                       slot_pointer(s, slots_.out), static_cast<cudaStream_t>(s.stream));
  }
  nlohmann::json describe() const override { return {{"name", "cuda_elementwise"}}; }

 private:
  ElementwiseProblem problem_;
  ElementwiseSlots slots_;
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
  std::vector<void*> checked;  // pointer last classified per slot
  std::vector<bool> is_host;   // its classification
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int ordinal, ge2_tune_mode_t tune_mode, const std::string& tunedb_path)
      : ordinal_(ordinal), workspaces_(kWorkspaceBytes) {
    GE2_CUDA_CHECK(cudaSetDevice(ordinal));
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
    chooser_ =
        std::make_unique<AlgoChooser>(lt_.get(), device_, tune_mode, tunedb_path, kWorkspaceBytes);
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
            {"workspace_bytes_per_stream", kWorkspaceBytes},
            {"tuning", chooser_->describe()}};
  }
  MeasuredTime measured_times() override { return chooser_->measured_times(); }

  std::unique_ptr<Step> make_gemm(const GemmProblem& problem, const GemmSlots& slots,
                                  KernelId kernel, bool staged) override {
    GE2_CUDA_CHECK(cudaSetDevice(ordinal_));
    require(kernel != KernelId::CpuRef, GE2_ERROR_UNSUPPORTED,
            "the CUDA backend cannot run kernel 'cpu_ref'");
    if (kernel == KernelId::CudaF32) return std::make_unique<FallbackGemmStep>(problem, slots, "");
    try {
      if (staged)
        return std::make_unique<StagedLtGemmStep>(lt_.get(), problem, kernel, slots, *chooser_);
      return std::make_unique<LtGemmStep>(lt_.get(), problem, kernel, slots, *chooser_);
    } catch (const Error& error) {
      // No algorithm or an inexpressible layout: fall back, and say why in the plan.
      if (error.status() != GE2_ERROR_CUBLAS && error.status() != GE2_ERROR_UNSUPPORTED) throw;
      return std::make_unique<FallbackGemmStep>(
          problem, slots,
          fmt::format("{} could not run this problem: {}", kernel_name(kernel), error.what()));
    }
  }
  std::unique_ptr<Step> make_elementwise(const ElementwiseProblem& problem,
                                         const ElementwiseSlots& slots) override {
    return std::make_unique<ElementwiseStep>(problem, slots);
  }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override {
    GE2_CUDA_CHECK(cudaSetDevice(ordinal_));
    return std::make_unique<DeviceBufferHolder>(bytes);
  }
  std::unique_ptr<PlanDeviceState> make_plan_state() override {
    GE2_CUDA_CHECK(cudaSetDevice(ordinal_));
    return std::make_unique<CudaPlanState>();
  }

  void execute(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
               const std::vector<std::size_t>& io_bytes,
               const std::vector<bool>& io_is_output) override {
    GE2_CUDA_CHECK(cudaSetDevice(ordinal_));
    auto& plan_state = static_cast<CudaPlanState&>(*state.device_state);
    if (classify_bound_pointers(state, io_bytes, plan_state)) {
      execute_staged(steps, state, io_bytes, io_is_output, plan_state);
      return;
    }
    run_ordered(steps, state, plan_state);
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

  void run_ordered(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
                   CudaPlanState& ps) {
    const auto stream = static_cast<cudaStream_t>(state.stream);
    // A stream being captured into a CUDA graph runs nothing now and may not wait
    // on work outside the capture: ordering replays against eager executions is
    // the caller's, and the capture leaves the plan's ordering state untouched.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    GE2_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    // Executions of one plan share its intermediates: a new stream waits for the last one.
    if (!capturing && ps.recorded && ps.last_stream != stream)
      GE2_CUDA_CHECK(cudaStreamWaitEvent(stream, ps.done.get(), 0));
    state.workspace = workspaces_.get(stream);
    state.workspace_bytes = workspaces_.bytes();
    for (const auto& step : steps) step->run(state);
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
    run_ordered(steps, state, ps);
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
                                           const std::string& tunedb_path) {
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
  return std::make_unique<cuda::CudaBackend>(device_ordinal, tune_mode, tunedb_path);
}

}  // namespace ge2
