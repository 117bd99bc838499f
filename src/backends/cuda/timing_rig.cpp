#include "backends/cuda/timing_rig.hpp"

#include <algorithm>

#include "backends/cuda/tune_kernels.hpp"

namespace ge2::cuda {
namespace {

constexpr int kTimedBatches = 7;
// Batches of about 300 us, no warm-up beyond one run. Under sustained load the
// H200 holds its 700 W cap by dropping the SM clock from 1980 to 930-1665 MHz,
// so these bursts rank kernels as the boost clock does, not as back-to-back
// execution of big GEMMs does. Run 10 tried 2 ms batches after 20 ms and after
// 300 ms of warm-up: the choices were worse in the sustained layer benchmark
// (up to 31% slower than the best kernel, against up to 7% with these bursts),
// because candidates timed one after another see different power states
// (bench/results/2026-12-03-h200-run10/README.md). Timing all candidates
// interleaved is the open fix.
constexpr double kTargetBatchUs = 300.0;
constexpr std::size_t kMaxRotationBytes = std::size_t{2} << 30;

std::int64_t span_elements(const MatrixView& v, std::int64_t batch) {
  return (batch - 1) * v.batch_stride + (v.rows - 1) * v.row_stride + (v.cols - 1) * v.col_stride +
         1;
}

}  // namespace

double agreement_bound(DType dtype, bool tf32) {
  if (dtype == DType::F32 && !tf32) return 1e-4;
  if (dtype == DType::F16 || tf32) return 5e-3;
  return 2e-2;  // bf16
}

TimingRig::TimingRig(const GemmProblem& p, int l2_bytes, std::size_t workspace_bytes)
    : problem_(p),
      stream_(make_nonblocking_stream()),
      start_(make_timing_event()),
      stop_(make_timing_event()),
      workspace_(workspace_bytes),
      workspace_bytes_(workspace_bytes) {
  const std::size_t element = dtype_size(p.dtype);
  const std::int64_t a_elems = span_elements(p.a, p.batch), b_elems = span_elements(p.b, p.batch);
  const std::size_t set_bytes = static_cast<std::size_t>(a_elems + b_elems) * element;
  // Enough input sets that each run finds its operands out of L2.
  const int sets = static_cast<int>(std::clamp<std::size_t>(
      (2 * static_cast<std::size_t>(l2_bytes) + set_bytes - 1) / set_bytes, 1,
      std::max<std::size_t>(
          1, std::min<std::size_t>(8, kMaxRotationBytes / std::max<std::size_t>(set_bytes, 1)))));
  std::uint64_t seed = 12345;
  for (int s = 0; s < sets; ++s) {
    a_.emplace_back(static_cast<std::size_t>(a_elems) * element);
    b_.emplace_back(static_cast<std::size_t>(b_elems) * element);
    fill_uniform(a_.back().data(), p.dtype, a_elems, ++seed, stream());
    fill_uniform(b_.back().data(), p.dtype, b_elems, ++seed, stream());
  }
  d_elements_ = span_elements(p.d, p.batch);
  d_ = DeviceBuffer(static_cast<std::size_t>(d_elements_) * element);
  reference_ = DeviceBuffer(static_cast<std::size_t>(d_elements_) * element);
  if (p.has_c) {
    const std::int64_t c_elems = span_elements(p.c, p.batch);
    c_ = DeviceBuffer(static_cast<std::size_t>(c_elems) * element);
    fill_uniform(c_.data(), p.dtype, c_elems, ++seed, stream());
  }
  if (p.has_bias) {
    const std::int64_t bias_elems = (p.n - 1) * p.bias_stride + 1;
    bias_ = DeviceBuffer(static_cast<std::size_t>(bias_elems) * element);
    fill_uniform(bias_.data(), p.dtype, bias_elems, ++seed, stream());
  }
}

LtPointers TimingRig::pointers(int set, void* d) {
  const auto s = static_cast<std::size_t>(set % sets());
  return {a_[s].data(), b_[s].data(), c_.data(), bias_.data(), d};
}

void TimingRig::clear(void* d) {
  GE2_CUDA_CHECK(cudaMemsetAsync(
      d, 0, static_cast<std::size_t>(d_elements_) * dtype_size(problem_.dtype), stream()));
}

double TimingRig::difference_from_reference() {
  return relative_difference(d_.data(), reference_.data(), problem_.dtype, d_elements_, stream());
}

double TimingRig::median_us(const std::function<void(int)>& run_once) {
  run_once(0);
  GE2_CUDA_CHECK(cudaStreamSynchronize(stream()));
  GE2_CUDA_CHECK(cudaEventRecord(start_.get(), stream()));
  run_once(1 % sets());
  GE2_CUDA_CHECK(cudaEventRecord(stop_.get(), stream()));
  GE2_CUDA_CHECK(cudaEventSynchronize(stop_.get()));
  float first_ms = 0;
  GE2_CUDA_CHECK(cudaEventElapsedTime(&first_ms, start_.get(), stop_.get()));
  const double first_us = std::max(1.0, first_ms * 1e3);
  const int reps = static_cast<int>(std::clamp(kTargetBatchUs / first_us, 1.0, 50.0));
  std::vector<double> times;
  for (int batch = 0; batch < kTimedBatches; ++batch) {
    GE2_CUDA_CHECK(cudaEventRecord(start_.get(), stream()));
    for (int r = 0; r < reps; ++r) run_once((batch * reps + r) % sets());
    GE2_CUDA_CHECK(cudaEventRecord(stop_.get(), stream()));
    GE2_CUDA_CHECK(cudaEventSynchronize(stop_.get()));
    float ms = 0;
    GE2_CUDA_CHECK(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
    times.push_back(ms * 1e3 / reps);
  }
  std::nth_element(times.begin(), times.begin() + kTimedBatches / 2, times.end());
  return times[kTimedBatches / 2];
}

}  // namespace ge2::cuda
