// The measuring bench the tuner times every kernel family on: random operands of
// one GEMM problem in rotating sets that together exceed L2 (so each run reads
// them from memory, as a plan does), an output and a reference output, a
// workspace, a private stream, and a median over batches of back-to-back runs
// timed with CUDA events.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <span>
#include <vector>

#include "backends/cuda/cuda_raii.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "ir/kernel_problems.hpp"

namespace ge2::cuda {

// The largest relative difference from the reference a candidate may show
// and still count as computing the same result: both accumulate in fp32, what
// differs is the order of the sums and the output's (or TF32's) rounding.
double agreement_bound(DType dtype, bool tf32);

// One kernel on the rig: enqueues a call for input set `set` on the rig's stream.
using Contender = std::function<void(int set)>;

// Calls at least this long are timed in the sustained power state (warm-up
// rounds first, GE2_TUNE_SUSTAIN_MS): their time depends on it.
inline constexpr double kSustainedCallUs = 50.0;

class TimingRig {
 public:
  TimingRig(const GemmProblem& problem, int l2_bytes, std::size_t workspace_bytes);

  const GemmProblem& problem() const { return problem_; }
  cudaStream_t stream() const { return stream_.get(); }
  void* workspace() { return workspace_.data(); }
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  int sets() const { return static_cast<int>(a_.size()); }

  // Operands of input set `set` writing `d` (output() or reference()).
  LtPointers pointers(int set, void* d);
  void* output() { return d_.data(); }
  void* reference() { return reference_.data(); }

  // Zeroes output() or reference(): padding compares equal, and a kernel that
  // writes nothing disagrees with the reference.
  void clear(void* d);
  // ||output - reference|| / ||reference|| over D's span; synchronises.
  double difference_from_reference();
  // The same for a gated unit's output (`gated.out`, written to output()) against
  // act(gate) * up of the reference's [gate | up] halves, on up to 64 sampled
  // rows, computed on the host; synchronises.
  double gated_difference_from_reference(const GatedOutput& gated);
  std::int64_t output_elements() const { return d_elements_; }
  // Median time in microseconds of one call of each contender, which enqueues
  // its work on stream() for input set `set`: the median of 7 batches of about
  // 300 us of back-to-back calls (timing_rig.cpp says why not longer). The
  // contenders are timed interleaved: every round times one batch of each, in an
  // order rotated from round to round, so the drift of clocks and power under
  // sustained load affects all of them alike. Where a call takes 50 us or more,
  // GE2_TUNE_SUSTAIN_MS (default 250, at most 5000) of untimed rounds come first,
  // so that the timed ones run in the sustained power state.
  std::vector<double> interleaved_medians_us(std::span<const Contender> contenders);
  double median_us(const Contender& run_once);

 private:
  GemmProblem problem_;
  Stream stream_;
  Event start_, stop_;
  std::vector<DeviceBuffer> a_, b_;
  DeviceBuffer c_, bias_, d_, reference_, workspace_;
  std::size_t workspace_bytes_;
  std::int64_t d_elements_ = 0;
};

}  // namespace ge2::cuda
