#include "exec/fp8_gate.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include "core/error.hpp"

namespace ge2 {
namespace {

// Backend memory of `count` elements of `dtype` drawn from N(0, 1).
std::unique_ptr<Buffer> random_buffer(Backend& backend, DType dtype, std::int64_t count,
                                      std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<unsigned char> host(static_cast<std::size_t>(count) * dtype_size(dtype));
  for (std::int64_t i = 0; i < count; ++i) store_from_float(host.data(), dtype, i, normal(rng));
  auto buffer = backend.allocate(host.size());
  backend.upload(*buffer, host.data(), host.size());
  return buffer;
}

std::vector<unsigned char> read_back(Backend& backend, Buffer& buffer, std::size_t bytes) {
  std::vector<unsigned char> host(bytes);
  backend.download(host.data(), buffer.data(), bytes);
  return host;
}

// Builds `kernel`'s step, or the selector's next choice when the backend refuses it.
std::unique_ptr<Step> build(Backend& backend, const GemmProblem& problem, const GemmSlots& slots,
                            Selection selection, const SelectionPolicy& policy) {
  while (true) {
    try {
      return backend.make_gemm(problem, slots, selection.kernel, selection.staged,
                               TuneUse::LookupOnly);
    } catch (const Error& error) {
      if (error.status() != GE2_ERROR_UNSUPPORTED && error.status() != GE2_ERROR_CUBLAS) throw;
      refuse_and_reselect(selection, problem, policy, error.what());
    }
  }
}

}  // namespace

Fp8GateResult measure_fp8_error(Backend& backend, const GemmProblem& problem, KernelId fp8_kernel,
                                const void* b, const void* bias, const void* b_prepared,
                                const SelectionPolicy& policy) {
  assert(is_fp8_kernel(fp8_kernel));
  GemmProblem p = fold_batch_into_m(problem);
  // The weights are what is judged: the calibration rows need not be the plan's.
  const std::int64_t rows = kFp8CalibrationRows;
  // A kernel for a few rows (the decode row, kSkinnyMaxRows) runs on slices of
  // them: a worst channel judged on 16 rows reads noise (run 30: 0.06-0.11 where
  // 256 rows read 0.044 with A quantized too).
  const std::int64_t slice_rows =
      kernel_info(fp8_kernel).family == KernelFamily::CudaSkinnyFp8 ? kSkinnyMaxRows : rows;
  static_assert(kFp8CalibrationRows % kSkinnyMaxRows == 0);
  p = with_rows(p, rows);
  // Calibration operands are dense; the plan's constants keep their layout.
  p.a = p.trans_a ? MatrixView{1, p.k, rows, 0, rows, 1} : MatrixView{1, rows, p.k, 0, p.k, 1};
  p.d = {1, rows, p.n, 0, p.n, 1};
  if (p.has_c) p.c = p.d;
  if (b == nullptr)
    p.b = p.trans_b ? MatrixView{1, p.n, p.k, 0, p.k, 1} : MatrixView{1, p.k, p.n, 0, p.n, 1};
  if (p.has_bias && bias == nullptr) p.bias_stride = 1;
  // Compared before the activation: ReLU, GELU and SiLU change neither output more
  // than its input (slope at most 1.13), and a channel they squeeze to near zero
  // would otherwise look broken on noise of the size of e4m3's steps.
  p.act = Activation::None;

  std::mt19937_64 rng(0x6765325f667038ULL);  // fixed: the same plan measures the same error
  std::vector<std::unique_ptr<Buffer>> owned;
  auto take = [&](std::unique_ptr<Buffer> buffer) {
    owned.push_back(std::move(buffer));
    return owned.back()->data();
  };
  const std::size_t d_bytes = static_cast<std::size_t>(rows * p.n) * dtype_size(p.dtype);
  std::vector<void*> pointers(8, nullptr);
  enum Slot { kA, kB, kC, kBias, kDFp8, kDRef, kScratch, kPrepared };
  pointers[kA] = take(random_buffer(backend, p.dtype, rows * p.k, rng));
  pointers[kB] = b ? const_cast<void*>(b) : take(random_buffer(backend, p.dtype, p.n * p.k, rng));
  if (p.has_c) pointers[kC] = take(random_buffer(backend, p.dtype, rows * p.n, rng));
  if (p.has_bias)
    pointers[kBias] =
        bias ? const_cast<void*>(bias) : take(random_buffer(backend, p.dtype, p.n, rng));
  const std::unique_ptr<Buffer> d_fp8 = backend.allocate(d_bytes);
  const std::unique_ptr<Buffer> d_ref = backend.allocate(d_bytes);
  pointers[kDFp8] = d_fp8->data();
  pointers[kDRef] = d_ref->data();
  if (const std::size_t scratch = backend.gemm_scratch_bytes(fp8_kernel, p, b_prepared != nullptr))
    pointers[kScratch] = take(backend.allocate(scratch));
  pointers[kPrepared] = const_cast<void*>(b_prepared);
  // The FP8 kernel's slices of A, C and D (the whole of them when it takes every row).
  struct Slice {
    int a, c, d;
  };
  std::vector<Slice> slices;
  // A new slot `offset` elements into slot `slot`.
  auto at = [&](int slot, std::int64_t offset) {
    pointers.push_back(static_cast<char*>(pointers[static_cast<std::size_t>(slot)]) +
                       static_cast<std::size_t>(offset) * dtype_size(p.dtype));
    return static_cast<int>(pointers.size() - 1);
  };
  for (std::int64_t first = 0; first < rows; first += slice_rows) {
    slices.push_back({at(kA, p.trans_a ? first : first * p.k), p.has_c ? at(kC, first * p.n) : -1,
                      at(kDFp8, first * p.n)});
  }

  SelectionPolicy reference_policy = policy;
  reference_policy.allow_fp8 = false;
  reference_policy.forced.reset();
  const Selection reference =
      select_gemm_kernel(p, backend.device(), reference_policy, {}, backend.gemm_kernels());
  const int has_c = p.has_c ? kC : -1, has_bias = p.has_bias ? kBias : -1;
  std::vector<std::unique_ptr<Step>> steps;
  // The gate measures this kernel or reports why the backend cannot build it
  // (cuBLASLt may offer no e4m3 algorithm for a problem).
  try {
    const GemmProblem slice_problem = with_rows(p, slice_rows);
    for (const Slice& slice : slices)
      steps.push_back(
          backend.make_gemm(slice_problem,
                            {slice.a, kB, slice.c, has_bias, slice.d,
                             pointers[kScratch] ? kScratch : -1, b_prepared ? kPrepared : -1},
                            fp8_kernel, false, TuneUse::LookupOnly));
  } catch (const Error& error) {
    if (error.status() != GE2_ERROR_UNSUPPORTED && error.status() != GE2_ERROR_CUBLAS) throw;
    const double unmeasured = std::numeric_limits<double>::quiet_NaN();
    return {unmeasured, unmeasured, rows, reference.kernel, error.what()};
  }
  steps.push_back(build(backend, p, {kA, kB, has_c, has_bias, kDRef}, reference, reference_policy));

  ExecState state;
  state.slots = pointers;
  state.device_state = backend.make_plan_state(false);
  backend.execute(steps, state, std::vector<std::size_t>(pointers.size(), 0),
                  std::vector<bool>(pointers.size(), false));
  const auto fp8 = read_back(backend, *d_fp8, d_bytes);
  const auto ref = read_back(backend, *d_ref, d_bytes);

  // Per output channel (column of D): quantization fails channel by channel (a
  // channel whose weights span more than e4m3's range loses its small ones), and
  // the layer's Frobenius norm would let a few large channels hide the rest.
  std::vector<double> difference(static_cast<std::size_t>(p.n)), norm(difference.size());
  double total_difference = 0, total_norm = 0;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < p.n; ++j) {
      const double want = load_as_float(ref.data(), p.dtype, i * p.n + j);
      const double got = load_as_float(fp8.data(), p.dtype, i * p.n + j);
      difference[static_cast<std::size_t>(j)] += (got - want) * (got - want);
      norm[static_cast<std::size_t>(j)] += want * want;
      total_difference += (got - want) * (got - want);
      total_norm += want * want;
    }
  auto ratio = [](double d, double n) {
    const double r = n > 0 ? std::sqrt(d / n) : (d == 0 ? 0.0 : INFINITY);
    return std::isnan(r) ? std::numeric_limits<double>::infinity() : r;
  };
  // A channel far below the typical (median) one is judged against a hundredth
  // of the typical norm, not against its own: a bias can cancel a channel.
  std::vector<double> sorted = norm;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2),
                   sorted.end());
  const double floor = 1e-4 * sorted[sorted.size() / 2];
  double worst = 0;
  for (std::size_t j = 0; j < difference.size(); ++j)
    worst = std::max(worst, ratio(difference[j], std::max(norm[j], floor)));
  if (!std::isfinite(total_norm)) worst = std::numeric_limits<double>::infinity();
  return {ratio(total_difference, total_norm), worst, rows, reference.kernel, ""};
}

}  // namespace ge2
