#include "backends/cuda/algo_choice.hpp"

#include <chrono>
#include <cstdio>

#include "backends/cuda/kernels.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "select/tune_key.hpp"

namespace ge2::cuda {
namespace {

int l2_cache_bytes() {
  int device = 0, bytes = 0;
  GE2_CUDA_CHECK(cudaGetDevice(&device));
  GE2_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device));
  return bytes;
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

AlgoChooser::AlgoChooser(cublasLtHandle_t handle, const DeviceInfo& device, ge2_tune_mode_t mode,
                         const std::string& tunedb_path, std::size_t workspace_bytes,
                         const Logger& logger)
    : handle_(handle),
      device_(device),
      mode_(mode),
      workspace_bytes_(workspace_bytes),
      logger_(logger),
      db_(mode == GE2_TUNE_OFF ? std::string() : tunedb_path, mode == GE2_TUNE_TUNE, logger) {}

AlgoChooser::~AlgoChooser() = default;

AlgoChoice AlgoChooser::heuristic(const LtMatmul& matmul, std::uint32_t alignment,
                                  bool without_workspace) const {
  const auto first = matmul.first_choice(without_workspace ? 0 : workspace_bytes_, alignment);
  require(first.has_value(), GE2_ERROR_CUBLAS, "cuBLASLt offers no algorithm for GEMM {} ({}, {})",
          matmul.problem(), dtype_name(matmul.problem().dtype), kernel_name(matmul.kernel()));
  std::string source = alignment >= 16
                           ? "heuristic"
                           : fmt::format("heuristic for {}-byte-aligned pointers", alignment);
  if (without_workspace)
    source += ", without workspace";
  else if (first->without_workspace)
    source += fmt::format(", without workspace ({} rows or fewer, {} columns or more)",
                          kernel_info(matmul.kernel()).unsplit_max_rows_untuned,
                          kernel_info(matmul.kernel()).unsplit_min_columns_untuned);
  return {first->result.algo, read_algo_config(first->result.algo), first->result.workspaceSize,
          std::move(source)};
}

std::optional<AlgoChoice> AlgoChooser::from_record(const LtMatmul& matmul, const TuneRecord& record,
                                                   std::string source) {
  try {
    const AlgoConfig config = AlgoConfig::from_json(record.algo);
    auto algo = build_algo(handle_, matmul, config);
    std::size_t workspace = 0;
    if (algo && matmul.check(*algo, &workspace) && workspace <= workspace_bytes_)
      return AlgoChoice{*algo, config, workspace, std::move(source)};
  } catch (const std::exception&) {
    // Malformed JSON in a row: treated like a stale row below.
  }
  ++stale_rows_;
  logger_(LogLevel::Warning, "ignoring tunedb row for {}: cuBLASLt rejects its algorithm",
          record.key.to_string());
  return std::nullopt;
}

AlgoChoice AlgoChooser::tune_now(LtMatmul& matmul, const TuneKey& key, TuneDb::Replace replace,
                                 const GemmProblem* gated_form) {
  Tuner tuner(handle_, workspace_bytes_, l2_cache_bytes(), device_.sm_count);
  const GemmProblem plain = without_gated_output(matmul.problem());  // see measured()
  const TuneOutcome outcome = tuner.tune(matmul, rivals_of(plain, gated_form));
  tuned_ += 1 + static_cast<int>(outcome.rivals.size());
  timed_beside_cublaslt_ += static_cast<int>(outcome.rivals.size());
  for (const TimedRival& rival : outcome.rivals) {
    const GemmProblem& timed = rival.gated ? *gated_form : plain;
    const TuneKey rival_key = make_tune_key(timed, rival.kernel, device_);
    measured_[rival_key.to_string()] = rival.time_us;
    record(rival_key, timed, rival.config, rival.time_us, TuneDb::Replace::IfFaster);
  }
  const double gflops = matmul.problem().flops() / (outcome.best.time_us * 1e3);
  measured_[key.to_string()] = outcome.best.time_us;
  TuneKey fallback_key = make_tune_key(matmul.problem(), KernelId::CudaF32, device_);
  measured_[fallback_key.to_string()] = outcome.fallback_time_us;
  if (db_.writable()) {
    TuneRecord record{key,
                      outcome.best.config.to_json(),
                      static_cast<std::int64_t>(outcome.best.workspace_bytes),
                      outcome.best.time_us,
                      outcome.heuristic_time_us,
                      gflops,
                      utc_now(),
                      GE2_VERSION_STRING};
    db_.store(record, replace);
    TuneRecord fallback{fallback_key,
                        nlohmann::json::object(),
                        0,
                        outcome.fallback_time_us,
                        0,
                        matmul.problem().flops() / (outcome.fallback_time_us * 1e3),
                        utc_now(),
                        GE2_VERSION_STRING};
    db_.store(fallback);
  }
  std::string alone;
  if (outcome.alone_us)
    alone = fmt::format("; fastest candidate alone {:.1f} us vs heuristic alone {:.1f} us{}",
                        outcome.alone_us->first, outcome.alone_us->second,
                        outcome.alone_us->first < outcome.alone_us->second
                            ? ""
                            : ": kept the heuristic's algorithm");
  return {outcome.best.algo, outcome.best.config, outcome.best.workspace_bytes,
          fmt::format("tuned now ({} candidates, {} rejected, {} other kernels timed beside them; "
                      "{:.1f} us vs heuristic {:.1f} us{})",
                      outcome.candidates, outcome.rejected, outcome.rivals.size(),
                      outcome.best.time_us, outcome.heuristic_time_us, alone)};
}

AlgoChoice AlgoChooser::choose(LtMatmul& matmul, TuneUse tune, const GemmProblem* gated_form) {
  const TuneKey key = make_tune_key(matmul.problem(), matmul.kernel(), device_);
  // The key holds the layout's exact alignment: an algorithm chosen for bf16 rows
  // of 44 bytes is refused at the call for rows of 46 (CUBLAS_STATUS_NOT_SUPPORTED).
  const std::string text = key.to_string();
  std::lock_guard lock(mutex_);  // also makes tuning of one key happen once per process
  if (auto it = choices_.find(text); it != choices_.end()) return it->second;
  const bool lookup_only = mode_ == GE2_TUNE_TUNE && tune == TuneUse::LookupOnly;
  AlgoChoice choice;
  bool found = false;
  auto replace = TuneDb::Replace::IfFaster;
  if (mode_ != GE2_TUNE_OFF) {
    if (auto row = db_.find_exact(key)) {
      if (auto c = from_record(matmul, *row, "tunedb")) {
        choice = *c;
        choice.exact_row = true;
        found = true;
      } else {
        replace = TuneDb::Replace::Always;
      }
    }
  }
  if (!found && mode_ == GE2_TUNE_TUNE && !lookup_only) {
    choice = tune_now(matmul, key, replace, gated_form);
    found = true;
  }
  if (!found && (mode_ == GE2_TUNE_CACHED || lookup_only)) {
    for (const auto& row : db_.find_in_bucket(key)) {
      if (row.key.to_string() == text) continue;  // the exact row, refused above
      if (auto c = from_record(
              matmul, row,
              fmt::format("tunedb bucket (tuned at {}x{}x{})", row.key.m, row.key.n, row.key.k))) {
        choice = *c;
        found = true;
        break;
      }
    }
  }
  if (!found) choice = heuristic(matmul, 16);
  if (!lookup_only) choices_.emplace(text, choice);
  return choice;
}

std::optional<double> AlgoChooser::measured(KernelId kernel, const GemmProblem& gemm) {
  if (mode_ == GE2_TUNE_OFF) return std::nullopt;
  // A gated unit (GemmProblem::gated): a kernel with the gated epilogue is timed
  // as the fused unit; the others run the plain GEMM and the selector adds their
  // gated_mul pass.
  const bool fused = gemm.gated && kernel_info(kernel).gated_epilogue &&
                     gated_epilogue_problem(gemm, kernel).empty();
  const GemmProblem problem = fused ? gemm : without_gated_output(gemm);
  const GemmProblem* gated_form = gemm.gated ? &gemm : nullptr;
  const TuneKey key = make_tune_key(problem, kernel, device_);
  const std::string text = key.to_string();
  std::lock_guard lock(mutex_);
  if (auto it = measured_.find(text); it != measured_.end()) return it->second;
  std::optional<double> time;
  auto replace = TuneDb::Replace::IfFaster;
  if (auto row = db_.find_exact(key)) {
    // Rows of ge2's own families carry their configuration: one of another build is stale.
    FamilyTimer* timer = timer_of(kernel);
    const bool own = is_cutlass_kernel(kernel) || timer != nullptr;
    if (is_cublaslt_kernel(kernel)) {
      time = cublaslt_row_time(kernel, problem, *row, gated_form);
    } else if (!own || (timer && timer->row_matches(kernel, problem, row->algo))) {
      time = row->time_us;
    } else {
      ++stale_rows_;
      replace = TuneDb::Replace::Always;
      logger_(LogLevel::Warning,
              "ignoring tunedb row for {}: its configuration {} is not this build's", text,
              row->algo.dump());
    }
  }
  if (!time && mode_ == GE2_TUNE_TUNE)
    time = measure_now(kernel, problem, key, replace, gated_form);
  measured_.insert_or_assign(text, time);
  return time;
}

std::optional<double> AlgoChooser::cublaslt_row_time(KernelId kernel, const GemmProblem& problem,
                                                     const TuneRecord& row,
                                                     const GemmProblem* gated_form) {
  std::optional<LtMatmul> matmul;
  try {
    matmul.emplace(handle_, problem, kernel);
  } catch (const Error&) {
    return std::nullopt;  // a layout cuBLASLt cannot express: the selector says why
  }
  // The choice the step will make (choose() validates the row, counts it if
  // stale, and in tuning mode tunes the problem again).
  const AlgoChoice choice = choose(*matmul, TuneUse::AsContext, gated_form);
  if (choice.exact_row) return row.time_us;
  if (const auto it = measured_.find(make_tune_key(problem, kernel, device_).to_string());
      it != measured_.end())
    return it->second;
  return row.heuristic_time_us > 0 ? row.heuristic_time_us : row.time_us;
}

std::optional<double> AlgoChooser::measure_now(KernelId kernel, const GemmProblem& problem,
                                               const TuneKey& key, TuneDb::Replace replace,
                                               const GemmProblem* gated_form) {
  const std::string text = key.to_string();
  if (is_cublaslt_kernel(kernel)) {
    // Tuning it also times cuda_f32 on the problem, and makes the tuned
    // algorithm the one its step will run; choose() sees a stale row itself.
    std::optional<LtMatmul> matmul;
    try {
      matmul.emplace(handle_, problem, kernel);
    } catch (const Error&) {
      return std::nullopt;  // a layout cuBLASLt cannot express: the selector says why
    }
    choose(*matmul, TuneUse::AsContext, gated_form);
    const auto it = measured_.find(text);
    return it != measured_.end() ? it->second : std::nullopt;
  }
  // Tuning the problem's cuBLASLt kernel times this one beside its candidates.
  const KernelId lt = cublaslt_kernel_for(problem.dtype);
  const GemmProblem plain = without_gated_output(problem);
  try {
    measure_now(lt, plain, make_tune_key(plain, lt, device_), TuneDb::Replace::IfFaster,
                gated_form);
  } catch (const Error&) {
    // cuBLASLt cannot run the problem: this kernel is timed alone below.
  }
  if (const auto it = measured_.find(text); it != measured_.end()) return it->second;
  const std::optional<TimedRival> timed = time_alone(kernel, problem);
  if (!timed) return std::nullopt;
  ++tuned_;
  record(key, problem, timed->config, timed->time_us, replace);
  return timed->time_us;
}

RivalSource AlgoChooser::rivals_of(const GemmProblem& problem, const GemmProblem* gated_form) {
  std::optional<GemmProblem> gated;
  if (gated_form) gated = *gated_form;
  return [this, problem, gated](TimingRig& rig) {
    std::vector<RivalKernel> rivals;
    auto add = [&](KernelId kernel, const GemmProblem& timed) {
      const TuneKey key = make_tune_key(timed, kernel, device_);
      if (measured_.contains(key.to_string()) || db_.find_exact(key)) return;
      std::optional<RivalKernel> rival;
      try {
        rival = checked_rival(kernel, timed, rig);
      } catch (const Error& error) {
        // A kernel that cannot be readied is left unmeasured; cuBLASLt's tuning goes on.
        logger_(LogLevel::Warning, "tuning: {} not timed on GEMM {}: {}", kernel_name(kernel),
                timed, error.what());
      }
      if (rival)
        rivals.push_back(std::move(*rival));
      else
        measured_.emplace(key.to_string(), std::nullopt);
    };
    for (const KernelInfo& info : kKernels) {
      if (timer_of(info.id) == nullptr || (info.dtype && *info.dtype != problem.dtype)) continue;
      add(info.id, problem);
      if (gated && info.gated_epilogue && gated_epilogue_problem(*gated, info.id).empty())
        add(info.id, *gated);
    }
    return rivals;
  };
}

std::optional<RivalKernel> AlgoChooser::checked_rival(KernelId kernel, const GemmProblem& problem,
                                                      TimingRig& rig) {
  std::optional<RivalKernel> rival = timer_of(kernel)->rival(kernel, problem, rig);
  if (!rival) return std::nullopt;
  rig.clear(rig.output());
  rival->run(0);
  const double difference = problem.gated ? rig.gated_difference_from_reference(*problem.gated)
                                          : rig.difference_from_reference();
  if (difference <= agreement_bound(problem.dtype, false)) return rival;
  logger_(LogLevel::Warning,
          "tuning: {}{} disagrees with the reference on GEMM {} (relative difference {:.3g}); not "
          "timed",
          kernel_name(kernel), problem.gated ? " (gated epilogue)" : "", problem, difference);
  return std::nullopt;
}

std::optional<TimedRival> AlgoChooser::time_alone(KernelId kernel, const GemmProblem& problem) {
  if (timer_of(kernel) == nullptr) return std::nullopt;
  const GemmProblem plain = without_gated_output(problem);  // the GEMM's operands and result
  TimingRig rig(plain, l2_cache_bytes(), workspace_bytes_);
  rig.clear(rig.reference());
  const LtPointers r = rig.pointers(0, rig.reference());
  launch_fallback_gemm(plain, r.a, r.b, r.c, r.bias, r.d, rig.stream());
  std::optional<RivalKernel> rival = checked_rival(kernel, problem, rig);
  if (!rival) return std::nullopt;
  return TimedRival{kernel, rival->gated, std::move(rival->config), rig.median_us(rival->run)};
}

void AlgoChooser::record(const TuneKey& key, const GemmProblem& problem,
                         const nlohmann::json& config, double time_us, TuneDb::Replace replace) {
  if (db_.writable())
    db_.store({key, config, 0, time_us, 0, problem.flops() / (time_us * 1e3), utc_now(),
               GE2_VERSION_STRING},
              replace);
}

FamilyTimer* AlgoChooser::timer_of(KernelId kernel) const {
  const auto it = timers_.find(kernel_info(kernel).family);
  return it == timers_.end() ? nullptr : it->second.get();
}

MeasuredTime AlgoChooser::measured_times() {
  return [this](KernelId kernel, const GemmProblem& problem) { return measured(kernel, problem); };
}

nlohmann::json AlgoChooser::describe() const {
  std::lock_guard lock(mutex_);
  static const char* modes[] = {"off", "cached", "tune"};
  nlohmann::json j = db_.describe();
  j["mode"] = modes[mode_];
  j["cached_choices"] = choices_.size();
  j["tuned_in_this_process"] = tuned_;
  j["timed_beside_cublaslt"] = timed_beside_cublaslt_;
  j["stale_rows_ignored"] = stale_rows_;
  return j;
}

}  // namespace ge2::cuda
