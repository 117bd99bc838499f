#include "backends/cuda/tuner.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "backends/cuda/cuda_raii.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/tune_kernels.hpp"
#include "core/error.hpp"

namespace ge2::cuda {
namespace {

constexpr int kTimedBatches = 7;
constexpr double kTargetBatchUs = 300.0;
constexpr std::size_t kMaxRotationBytes = std::size_t{2} << 30;

std::int64_t span_elements(const MatrixView& v, std::int64_t batch) {
  return (batch - 1) * v.batch_stride + (v.rows - 1) * v.row_stride + (v.cols - 1) * v.col_stride +
         1;
}

double agreement_bound(const LtMatmul& m) {
  switch (m.kernel()) {
    case KernelId::LtF32:
      return 1e-4;
    case KernelId::LtTf32:
    case KernelId::LtF16:
      return 5e-3;
    default:
      return 2e-2;
  }
}

struct Operands {
  std::vector<DeviceBuffer> a, b;  // rotating sets
  DeviceBuffer c, bias, d, reference;
  std::int64_t d_elements = 0;
};

}  // namespace

Tuner::Tuner(cublasLtHandle_t handle, std::size_t max_workspace_bytes, int l2_bytes)
    : handle_(handle), max_workspace_(max_workspace_bytes), l2_bytes_(l2_bytes) {}

TuneOutcome Tuner::tune(LtMatmul& matmul) {
  const GemmProblem& p = matmul.problem();
  const std::size_t element = dtype_size(p.dtype);
  Stream stream = [] {
    cudaStream_t s = nullptr;
    GE2_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return Stream(s);
  }();
  const std::int64_t a_elems = span_elements(p.a, p.batch), b_elems = span_elements(p.b, p.batch);
  const std::size_t set_bytes = static_cast<std::size_t>(a_elems + b_elems) * element;
  // Enough input sets that each run finds its operands out of L2.
  const int sets = static_cast<int>(std::clamp<std::size_t>(
      (2 * static_cast<std::size_t>(l2_bytes_) + set_bytes - 1) / set_bytes, 1,
      std::max<std::size_t>(
          1, std::min<std::size_t>(8, kMaxRotationBytes / std::max<std::size_t>(set_bytes, 1)))));
  Operands ops;
  std::uint64_t seed = 12345;
  for (int s = 0; s < sets; ++s) {
    ops.a.emplace_back(static_cast<std::size_t>(a_elems) * element);
    ops.b.emplace_back(static_cast<std::size_t>(b_elems) * element);
    fill_uniform(ops.a.back().data(), p.dtype, a_elems, ++seed, stream.get());
    fill_uniform(ops.b.back().data(), p.dtype, b_elems, ++seed, stream.get());
  }
  ops.d_elements = span_elements(p.d, p.batch);
  ops.d = DeviceBuffer(static_cast<std::size_t>(ops.d_elements) * element);
  ops.reference = DeviceBuffer(static_cast<std::size_t>(ops.d_elements) * element);
  if (p.has_c) {
    const std::int64_t c_elems = span_elements(p.c, p.batch);
    ops.c = DeviceBuffer(static_cast<std::size_t>(c_elems) * element);
    fill_uniform(ops.c.data(), p.dtype, c_elems, ++seed, stream.get());
  }
  if (p.has_bias) {
    const std::int64_t bias_elems = (p.n - 1) * p.bias_stride + 1;
    ops.bias = DeviceBuffer(static_cast<std::size_t>(bias_elems) * element);
    fill_uniform(ops.bias.data(), p.dtype, bias_elems, ++seed, stream.get());
  }
  DeviceBuffer workspace(max_workspace_);
  auto pointers = [&](int set, void* d) {
    return LtPointers{ops.a[static_cast<std::size_t>(set)].data(),
                      ops.b[static_cast<std::size_t>(set)].data(), ops.c.data(), ops.bias.data(),
                      d};
  };

  Event start = [] {
    cudaEvent_t e = nullptr;
    GE2_CUDA_CHECK(cudaEventCreate(&e));
    return Event(e);
  }();
  Event stop = [] {
    cudaEvent_t e = nullptr;
    GE2_CUDA_CHECK(cudaEventCreate(&e));
    return Event(e);
  }();
  // Median over batches of back-to-back runs rotating the input sets.
  auto median_us = [&](const std::function<void(int)>& run_once) {
    run_once(0);
    GE2_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    GE2_CUDA_CHECK(cudaEventRecord(start.get(), stream.get()));
    run_once(1 % sets);
    GE2_CUDA_CHECK(cudaEventRecord(stop.get(), stream.get()));
    GE2_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float first_ms = 0;
    GE2_CUDA_CHECK(cudaEventElapsedTime(&first_ms, start.get(), stop.get()));
    const int reps =
        static_cast<int>(std::clamp(kTargetBatchUs / std::max(1.0, first_ms * 1e3), 1.0, 50.0));
    std::vector<double> times;
    for (int batch = 0; batch < kTimedBatches; ++batch) {
      GE2_CUDA_CHECK(cudaEventRecord(start.get(), stream.get()));
      for (int r = 0; r < reps; ++r) run_once((batch * reps + r) % sets);
      GE2_CUDA_CHECK(cudaEventRecord(stop.get(), stream.get()));
      GE2_CUDA_CHECK(cudaEventSynchronize(stop.get()));
      float ms = 0;
      GE2_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      times.push_back(ms * 1e3 / reps);
    }
    std::nth_element(times.begin(), times.begin() + kTimedBatches / 2, times.end());
    return times[kTimedBatches / 2];
  };

  const auto heuristic = matmul.heuristic(1, max_workspace_, 16);
  require(!heuristic.empty(), GE2_ERROR_CUBLAS, "tuner: cuBLASLt offers no algorithm for GEMM {}",
          p.shape_string());
  TuneOutcome outcome;
  const cublasLtMatmulAlgo_t baseline = heuristic.front().algo;
  // Zeroed outputs: padding compares equal, and a candidate that writes nothing disagrees.
  const std::size_t d_bytes = static_cast<std::size_t>(ops.d_elements) * element;
  GE2_CUDA_CHECK(cudaMemsetAsync(ops.reference.data(), 0, d_bytes, stream.get()));
  matmul.run(baseline, pointers(0, ops.reference.data()), workspace.data(), max_workspace_,
             stream.get());
  outcome.heuristic_time_us = median_us([&](int set) {
    matmul.run(baseline, pointers(set, ops.d.data()), workspace.data(), max_workspace_,
               stream.get());
  });
  outcome.best = {baseline, read_algo_config(baseline), heuristic.front().workspaceSize,
                  outcome.heuristic_time_us};

  // Candidates: the heuristic's list under several workspace limits, without repeats.
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  for (std::size_t limit : {max_workspace_, std::size_t{4} << 20, std::size_t{0}}) {
    for (const auto& r : matmul.heuristic(32, limit, 16)) {
      const AlgoConfig config = read_algo_config(r.algo);
      const bool seen = std::any_of(candidates.begin(), candidates.end(), [&](const auto& c) {
        return read_algo_config(c.algo) == config;
      });
      if (!seen) candidates.push_back(r);
    }
  }
  const double bound = agreement_bound(matmul);
  for (const auto& candidate : candidates) {
    ++outcome.candidates;
    GE2_CUDA_CHECK(cudaMemsetAsync(ops.d.data(), 0, d_bytes, stream.get()));
    matmul.run(candidate.algo, pointers(0, ops.d.data()), workspace.data(), max_workspace_,
               stream.get());
    const double difference = relative_difference(ops.d.data(), ops.reference.data(), p.dtype,
                                                  ops.d_elements, stream.get());
    if (!(difference <= bound)) {
      ++outcome.rejected;
      continue;
    }
    const double time = median_us([&](int set) {
      matmul.run(candidate.algo, pointers(set, ops.d.data()), workspace.data(), max_workspace_,
                 stream.get());
    });
    if (time < outcome.best.time_us)
      outcome.best = {candidate.algo, read_algo_config(candidate.algo), candidate.workspaceSize,
                      time};
  }
  outcome.fallback_time_us = median_us([&](int set) {
    const LtPointers ptr = pointers(set, ops.d.data());
    launch_fallback_gemm(p, ptr.a, ptr.b, ptr.c, ptr.bias, ptr.d, stream.get());
  });
  return outcome;
}

}  // namespace ge2::cuda
