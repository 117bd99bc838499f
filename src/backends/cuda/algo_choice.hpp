// Chooses the cuBLASLt algorithm of each GEMM step according to the context's
// tune mode, through an in-memory cache in front of the tuning database.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backends/cuda/algo_config.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "backends/cuda/tuner.hpp"
#include "select/device_info.hpp"
#include "select/selector.hpp"
#include "tunedb/tunedb_access.hpp"

namespace ge2::cuda {

struct AlgoChoice {
  cublasLtMatmulAlgo_t algo{};
  AlgoConfig config;
  std::size_t workspace_bytes = 0;
  std::string source;  // "heuristic", "tunedb", "tunedb bucket ...", "tuned now"
};

class AlgoChooser {
 public:
  AlgoChooser(cublasLtHandle_t handle, const DeviceInfo& device, ge2_tune_mode_t mode,
              const std::string& tunedb_path, std::size_t workspace_bytes);
  ~AlgoChooser();

  AlgoChoice choose(LtMatmul& matmul);
  // cuBLASLt's first choice for pointers aligned to `alignment` bytes.
  AlgoChoice heuristic(const LtMatmul& matmul, std::uint32_t alignment) const;
  MeasuredTime measured_times();
  nlohmann::json describe() const;

 private:
  std::optional<AlgoChoice> from_record(const LtMatmul& matmul, const TuneRecord& record,
                                        std::string source);
  AlgoChoice tune_now(LtMatmul& matmul, const TuneKey& key);
  std::optional<double> measured(KernelId kernel, const GemmProblem& problem);

  cublasLtHandle_t handle_;
  DeviceInfo device_;
  ge2_tune_mode_t mode_;
  std::size_t workspace_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, AlgoChoice> choices_;
  std::unordered_map<std::string, std::optional<double>> measured_;
  TuneDbAccess db_;
  int stale_rows_ = 0, tuned_ = 0;
};

}  // namespace ge2::cuda
