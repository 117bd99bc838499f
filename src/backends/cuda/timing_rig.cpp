#include "backends/cuda/timing_rig.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>

#include "backends/cuda/tune_kernels.hpp"
#include "core/activation.hpp"
#include "core/log.hpp"

namespace ge2::cuda {
namespace {

constexpr int kTimedBatches = 7;
// Batches of about 300 us. Under sustained load the H200 holds its 700 W cap by
// dropping the SM clock from 1980 to 930-1665 MHz, and kernels rank differently
// there than at the boost clock. Timed one after another, each with idle gaps
// between batches, candidates saw different power states and the tuner ranked
// them by when they ran: run 10 (up to 7% slower than the best kernel in the
// sustained layer benchmark; longer batches after warm-up did worse, up to 31%)
// and run 15 (tuned gated GEMMs 7-13% slower than untuned ones;
// bench/results/2026-12-04-h200-run15/README.md). Hence interleaved_medians_us:
// every candidate of a problem, of every family, timed round by round in
// rotation, each round one gap-free stretch of device work.
constexpr double kTargetBatchUs = 300.0;
constexpr std::size_t kMaxRotationBytes = std::size_t{2} << 30;
// Short interleaved rounds still run at the boost clock the idle board starts
// from, which sustained work does not keep: run 19 (H100) timed cuBLASLt's
// 2048x22016x4096 bf16 GEMM at 461 us in the tuner and 587 us in sustained
// replay (-21%), the CUTLASS gated kernel at 535 and 553 (-3%), so the tuner
// ranked them the wrong way round. Problems of kSustainedCallUs or longer get
// gap-free warm-up rounds of all contenders first, for GE2_TUNE_SUSTAIN_MS of
// device time, so the timed rounds start in the state a plan's layers run in.
constexpr double kDefaultSustainMs = 250.0;
constexpr double kMaxSustainMs = 5000.0;

double sustain_us() {
  const char* text = std::getenv("GE2_TUNE_SUSTAIN_MS");
  if (text == nullptr || *text == '\0') return kDefaultSustainMs * 1e3;
  char* end = nullptr;
  const double ms = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(ms >= 0)) {
    Logger{}(LogLevel::Warning,
             "GE2_TUNE_SUSTAIN_MS='{}' is not a number of milliseconds >= 0; using {}", text,
             kDefaultSustainMs);
    return kDefaultSustainMs * 1e3;
  }
  return std::min(ms, kMaxSustainMs) * 1e3;
}

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

double TimingRig::gated_difference_from_reference(const GatedOutput& gated) {
  GE2_CUDA_CHECK(cudaStreamSynchronize(stream()));
  const GemmProblem& p = problem_;
  const DTypeInfo& type = dtype_info(p.dtype);
  const std::int64_t half = p.n / 2, rows = p.batch * p.m;
  const std::int64_t samples = std::min<std::int64_t>(rows, 64);
  const MatrixView &d = p.d, &out = gated.out;
  std::vector<unsigned char> reference_row(static_cast<std::size_t>((p.n - 1) * d.col_stride + 1) *
                                           type.bytes);
  std::vector<unsigned char> output_row(static_cast<std::size_t>((half - 1) * out.col_stride + 1) *
                                        type.bytes);
  double difference = 0, norm = 0;
  for (std::int64_t s = 0; s < samples; ++s) {
    const std::int64_t row = s * rows / samples, batch = row / p.m, i = row % p.m;
    const auto* reference = static_cast<const unsigned char*>(reference_.data()) +
                            (batch * d.batch_stride + i * d.row_stride) * type.bytes;
    const auto* output = static_cast<const unsigned char*>(d_.data()) +
                         (batch * out.batch_stride + i * out.row_stride) * type.bytes;
    GE2_CUDA_CHECK(
        cudaMemcpy(reference_row.data(), reference, reference_row.size(), cudaMemcpyDeviceToHost));
    GE2_CUDA_CHECK(
        cudaMemcpy(output_row.data(), output, output_row.size(), cudaMemcpyDeviceToHost));
    for (std::int64_t j = 0; j < half; ++j) {
      const float want =
          apply_activation(gated.act, type.load(reference_row.data(), j * d.col_stride)) *
          type.load(reference_row.data(), (half + j) * d.col_stride);
      const float got = type.load(output_row.data(), j * out.col_stride);
      difference += (static_cast<double>(got) - want) * (static_cast<double>(got) - want);
      norm += static_cast<double>(want) * want;
    }
  }
  return norm > 0 ? std::sqrt(difference / norm) : (difference > 0 ? HUGE_VAL : 0.0);
}

std::vector<double> TimingRig::interleaved_medians_us(std::span<const Contender> contenders) {
  const std::size_t count = contenders.size();
  auto elapsed_us = [](const Event& from, const Event& to) {
    float ms = 0;
    GE2_CUDA_CHECK(cudaEventElapsedTime(&ms, from.get(), to.get()));
    return ms * 1e3;
  };
  // One untimed call each, then one timed call that sizes the contender's batches.
  std::vector<int> reps(count);
  double round_us = 0, slowest_call_us = 0;
  for (std::size_t i = 0; i < count; ++i) {
    contenders[i](0);
    GE2_CUDA_CHECK(cudaStreamSynchronize(stream()));
    GE2_CUDA_CHECK(cudaEventRecord(start_.get(), stream()));
    contenders[i](1 % sets());
    GE2_CUDA_CHECK(cudaEventRecord(stop_.get(), stream()));
    GE2_CUDA_CHECK(cudaEventSynchronize(stop_.get()));
    const double call_us = std::max(1.0, elapsed_us(start_, stop_));
    reps[i] = static_cast<int>(std::clamp(kTargetBatchUs / call_us, 1.0, 50.0));
    round_us += reps[i] * call_us;
    slowest_call_us = std::max(slowest_call_us, call_us);
  }
  // A round enqueues one batch of every contender back to back, an event between
  // each two. All rounds are enqueued before the one wait at the end: the device
  // runs them without idle gaps, in the power state sustained work holds it in,
  // like a plan's layers. The warm-up rounds (one, or GE2_TUNE_SUSTAIN_MS of
  // them for long problems) only bring the device into that state.
  assert(count > 0 && round_us > 0);
  int warmup_rounds = 1;
  if (slowest_call_us >= kSustainedCallUs)
    warmup_rounds = std::max(1, static_cast<int>(std::ceil(sustain_us() / round_us)));
  std::vector<std::vector<Event>> marks(kTimedBatches);
  std::vector<std::vector<std::size_t>> orders(kTimedBatches);
  for (int round = 0; round < warmup_rounds + kTimedBatches; ++round) {
    const int timed = round - warmup_rounds;  // index of the timed round, or < 0
    if (timed >= 0) {
      marks[timed].push_back(make_timing_event());
      GE2_CUDA_CHECK(cudaEventRecord(marks[timed].back().get(), stream()));
    }
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t i = (j + static_cast<std::size_t>(round)) % count;
      for (int r = 0; r < reps[i]; ++r) contenders[i]((round * reps[i] + r) % sets());
      if (timed < 0) continue;
      marks[timed].push_back(make_timing_event());
      GE2_CUDA_CHECK(cudaEventRecord(marks[timed].back().get(), stream()));
      orders[timed].push_back(i);
    }
  }
  GE2_CUDA_CHECK(cudaStreamSynchronize(stream()));
  std::vector<std::vector<double>> times(count);
  for (int round = 0; round < kTimedBatches; ++round)
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t i = orders[round][j];
      times[i].push_back(elapsed_us(marks[round][j], marks[round][j + 1]) / reps[i]);
    }
  std::vector<double> medians;
  for (auto& t : times) {
    std::nth_element(t.begin(), t.begin() + kTimedBatches / 2, t.end());
    medians.push_back(t[kTimedBatches / 2]);
  }
  return medians;
}

double TimingRig::median_us(const Contender& run_once) {
  return interleaved_medians_us(std::span(&run_once, 1)).front();
}

}  // namespace ge2::cuda
