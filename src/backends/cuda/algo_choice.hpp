// Chooses the cuBLASLt algorithm of each GEMM step according to the context's
// tune mode, through an in-memory cache in front of the tuning database.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "backends/cuda/algo_config.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "backends/cuda/tuner.hpp"
#include "exec/backend.hpp"
#include "select/device_info.hpp"
#include "select/selector.hpp"
#include "tunedb/tunedb_access.hpp"

namespace ge2::cuda {

struct AlgoChoice {
  cublasLtMatmulAlgo_t algo{};
  AlgoConfig config;
  std::size_t workspace_bytes = 0;
  std::string source;      // "heuristic", "tunedb", "tunedb bucket ...", "tuned now"
  bool exact_row = false;  // the problem's own stored row (source "tunedb")
};

// Readies the kernels of one of ge2's own families (CUTLASS rows, cuda_skinny)
// for timing beside cuBLASLt's candidates (Tuner), and says whether a stored row
// still describes the kernel built now.
class FamilyTimer {
 public:
  virtual ~FamilyTimer() = default;
  // `kernel` on the rig's operands (the rig is made for `problem` without its
  // gated output); empty when it cannot run the problem. For a gated problem,
  // the kernel's gated epilogue. AlgoChooser checks its output before timing it.
  virtual std::optional<RivalKernel> rival(KernelId kernel, const GemmProblem& problem,
                                           TimingRig& rig) = 0;
  virtual bool row_matches(KernelId kernel, const GemmProblem& problem,
                           const nlohmann::json& stored_config) const = 0;
};

class AlgoChooser {
 public:
  AlgoChooser(cublasLtHandle_t handle, const DeviceInfo& device, ge2_tune_mode_t mode,
              const std::string& tunedb_path, std::size_t workspace_bytes, const Logger& logger);
  ~AlgoChooser();

  // Times the rows of `family` (one of ge2's own kernel families) in tuning mode
  // and validates their stored rows.
  void set_family_timer(KernelFamily family, std::unique_ptr<FamilyTimer> timer) {
    timers_[family] = std::move(timer);
  }

  // `tune` LookupOnly: a context in tuning mode reads stored rows (exact, then
  // the size bucket's) as in cached mode instead of tuning; the result is not
  // cached, so a later compile of that problem still tunes it.
  AlgoChoice choose(LtMatmul& matmul, TuneUse tune = TuneUse::AsContext) {
    return choose(matmul, tune, nullptr);
  }
  // cuBLASLt's first choice for pointers aligned to `alignment` bytes, under the
  // context's workspace, or under none with `without_workspace`.
  AlgoChoice heuristic(const LtMatmul& matmul, std::uint32_t alignment,
                       bool without_workspace = false) const;
  MeasuredTime measured_times();
  nlohmann::json describe() const;
  int sm_count() const { return device_.sm_count; }

 private:
  // `gated_form`: the gated unit (GemmProblem::gated) whose plain GEMM `matmul`
  // runs, if any: tuning it also times the gated epilogues beside its candidates.
  AlgoChoice choose(LtMatmul& matmul, TuneUse tune, const GemmProblem* gated_form);
  std::optional<AlgoChoice> from_record(const LtMatmul& matmul, const TuneRecord& record,
                                        std::string source);
  // `replace`: the stored row of `key` was unusable, so the new result replaces
  // it even when slower (else it would be tuned again in every process).
  AlgoChoice tune_now(LtMatmul& matmul, const TuneKey& key, TuneDb::Replace replace,
                      const GemmProblem* gated_form);
  // The measured step time of `kernel` on `problem`: from this process, the
  // database, or (tuning mode) measured now, for every kernel family. For a
  // gated unit, a kernel with the gated epilogue is timed as the fused unit,
  // the others on the plain GEMM (the selector adds their gated_mul pass).
  std::optional<double> measured(KernelId kernel, const GemmProblem& problem);
  // The time a cuBLASLt row gives its problem's step: the row's own where its
  // algorithm is the one the step runs; where cuBLASLt rejects the algorithm
  // now, the step runs another (the heuristic's) and the row's time for the
  // heuristic's choice stands in (tuning mode: the problem is tuned again).
  std::optional<double> cublaslt_row_time(KernelId kernel, const GemmProblem& problem,
                                          const TuneRecord& row, const GemmProblem* gated_form);
  std::optional<double> measure_now(KernelId kernel, const GemmProblem& problem, const TuneKey& key,
                                    TuneDb::Replace replace, const GemmProblem* gated_form);
  // The kernels of ge2's own families that Tuner times beside cuBLASLt's
  // candidates for the plain `problem` (and the gated epilogues of `gated_form`):
  // those without a time in this process or a row.
  RivalSource rivals_of(const GemmProblem& problem, const GemmProblem* gated_form);
  // `kernel` readied on `rig` for `problem` and checked against the rig's reference
  // (a gated problem: its act(gate) * up); empty, with a warning, when it disagrees.
  std::optional<RivalKernel> checked_rival(KernelId kernel, const GemmProblem& problem,
                                           TimingRig& rig);
  // A rival timed alone, against cuda_f32: where no cuBLASLt kernel runs the
  // problem, or its stored row is stale.
  std::optional<TimedRival> time_alone(KernelId kernel, const GemmProblem& problem);
  void record(const TuneKey& key, const GemmProblem& problem, const nlohmann::json& config,
              double time_us, TuneDb::Replace replace);

  cublasLtHandle_t handle_;
  DeviceInfo device_;
  ge2_tune_mode_t mode_;
  std::size_t workspace_bytes_;
  // Recursive: measuring a cuBLASLt kernel in measured() tunes it through choose().
  mutable std::recursive_mutex mutex_;
  std::unordered_map<std::string, AlgoChoice> choices_;
  std::unordered_map<std::string, std::optional<double>> measured_;
  Logger logger_;
  TuneDbAccess db_;
  std::unordered_map<KernelFamily, std::unique_ptr<FamilyTimer>> timers_;
  FamilyTimer* timer_of(KernelId kernel) const;
  // tuned_: kernels measured in this process; timed_beside_cublaslt_: those of
  // them from ge2's own families that were timed interleaved with cuBLASLt's
  // candidates (the rest, timed alone, had no cuBLASLt kernel to join).
  int stale_rows_ = 0, tuned_ = 0, timed_beside_cublaslt_ = 0;
};

}  // namespace ge2::cuda
