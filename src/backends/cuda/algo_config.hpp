// A cuBLASLt algorithm by its configuration attributes: what the plan text
// shows and the tuning database stores, and how to rebuild it.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ge2::cuda {

class LtMatmul;

struct AlgoConfig {
  std::int32_t algo_id = -1;
  std::uint32_t tile = 0;
  std::uint32_t stages = 0;
  std::int32_t split_k = 1;
  std::uint32_t reduction_scheme = 0;
  std::uint32_t swizzle = 0;
  std::uint32_t custom_option = 0;
  std::uint16_t inner_shape = 0;
  std::uint16_t cluster_shape = 0;

  nlohmann::json to_json() const;
  static AlgoConfig from_json(const nlohmann::json& j);
  bool operator==(const AlgoConfig&) const = default;
};

AlgoConfig read_algo_config(const cublasLtMatmulAlgo_t& algo);
// Rebuilds the algorithm for `matmul`; empty if cuBLASLt rejects it (stale or foreign config).
std::optional<cublasLtMatmulAlgo_t> build_algo(cublasLtHandle_t handle, const LtMatmul& matmul,
                                               const AlgoConfig& config);

}  // namespace ge2::cuda
