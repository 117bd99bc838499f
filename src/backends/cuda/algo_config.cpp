#include "backends/cuda/algo_config.hpp"

#include "backends/cuda/lt_matmul.hpp"

namespace ge2::cuda {
namespace {

template <typename T>
T get(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute,
      T fallback) {
  T value = fallback;
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return fallback;
  return value;
}

template <typename T>
bool set(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute, T value) {
  return cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &value, sizeof(value)) ==
         CUBLAS_STATUS_SUCCESS;
}

}  // namespace

nlohmann::json AlgoConfig::to_json() const {
  return {{"algo_id", algo_id},
          {"tile", tile},
          {"stages", stages},
          {"split_k", split_k},
          {"reduction_scheme", reduction_scheme},
          {"swizzle", swizzle},
          {"custom_option", custom_option},
          {"inner_shape", inner_shape},
          {"cluster_shape", cluster_shape}};
}

AlgoConfig AlgoConfig::from_json(const nlohmann::json& j) {
  AlgoConfig c;
  c.algo_id = j.at("algo_id").get<std::int32_t>();
  c.tile = j.at("tile").get<std::uint32_t>();
  c.stages = j.at("stages").get<std::uint32_t>();
  c.split_k = j.at("split_k").get<std::int32_t>();
  c.reduction_scheme = j.at("reduction_scheme").get<std::uint32_t>();
  c.swizzle = j.at("swizzle").get<std::uint32_t>();
  c.custom_option = j.at("custom_option").get<std::uint32_t>();
  c.inner_shape = j.value("inner_shape", std::uint16_t{0});
  c.cluster_shape = j.value("cluster_shape", std::uint16_t{0});
  return c;
}

AlgoConfig read_algo_config(const cublasLtMatmulAlgo_t& algo) {
  AlgoConfig c;
  c.algo_id = get<std::int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID, -1);
  c.tile = get<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, 0);
  c.stages = get<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, 0);
  c.split_k = get<std::int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
  c.reduction_scheme = get<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 0);
  c.swizzle = get<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 0);
  c.custom_option = get<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 0);
  c.inner_shape = get<std::uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, 0);
  c.cluster_shape = get<std::uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 0);
  return c;
}

std::optional<cublasLtMatmulAlgo_t> build_algo(cublasLtHandle_t handle, const LtMatmul& matmul,
                                               const AlgoConfig& c) {
  const LtMatmulTypes types = matmul.types();
  cublasLtMatmulAlgo_t algo{};
  if (cublasLtMatmulAlgoInit(handle, types.compute, types.scale, types.data, types.data, types.data,
                             types.data, c.algo_id, &algo) != CUBLAS_STATUS_SUCCESS)
    return std::nullopt;
  const bool ok = set(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, c.tile) &&
                  set(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, c.stages) &&
                  set(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c.split_k) &&
                  set(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction_scheme) &&
                  set(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c.swizzle) &&
                  set(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c.custom_option) &&
                  set(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, c.inner_shape) &&
                  set(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c.cluster_shape);
  if (!ok || !matmul.check(algo, nullptr)) return std::nullopt;
  return algo;
}

}  // namespace ge2::cuda
