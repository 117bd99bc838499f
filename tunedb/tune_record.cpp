#include "tunedb/tune_record.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ge2 {

std::string TuneKey::to_string() const {
  return fmt::format("{}|{}|{}|{}|{}x{}x{}x{}", device, cublaslt_version, kernel, signature, batch,
                     m, n, k);
}

std::int64_t size_bucket(std::int64_t size) {
  if (size <= 256) {
    std::int64_t bucket = 1;
    while (bucket < size) bucket *= 2;
    return bucket;
  }
  return (size + 255) / 256 * 256;
}

nlohmann::json TuneRecord::to_json() const {
  return {{"device", key.device},
          {"cublaslt_version", key.cublaslt_version},
          {"kernel", key.kernel},
          {"signature", key.signature},
          {"m", key.m},
          {"n", key.n},
          {"k", key.k},
          {"batch", key.batch},
          {"algo", algo},
          {"workspace_bytes", workspace_bytes},
          {"time_us", time_us},
          {"heuristic_time_us", heuristic_time_us},
          {"gflops", gflops},
          {"created_at", created_at},
          {"ge2_version", ge2_version}};
}

TuneRecord TuneRecord::from_json(const nlohmann::json& j) {
  try {
    TuneRecord r;
    r.key.device = j.at("device").get<std::string>();
    r.key.cublaslt_version = j.at("cublaslt_version").get<std::int64_t>();
    r.key.kernel = j.at("kernel").get<std::string>();
    r.key.signature = j.at("signature").get<std::string>();
    r.key.m = j.at("m").get<std::int64_t>();
    r.key.n = j.at("n").get<std::int64_t>();
    r.key.k = j.at("k").get<std::int64_t>();
    r.key.batch = j.at("batch").get<std::int64_t>();
    r.algo = j.at("algo");
    r.workspace_bytes = j.at("workspace_bytes").get<std::int64_t>();
    r.time_us = j.at("time_us").get<double>();
    r.heuristic_time_us = j.value("heuristic_time_us", 0.0);
    r.gflops = j.value("gflops", 0.0);
    r.created_at = j.value("created_at", "");
    r.ge2_version = j.value("ge2_version", "");
    require(r.key.m > 0 && r.key.n > 0 && r.key.k > 0 && r.key.batch > 0, GE2_ERROR_TUNEDB,
            "tunedb: row has non-positive sizes {}x{}x{}x{}", r.key.batch, r.key.m, r.key.n,
            r.key.k);
    require(r.time_us > 0 && std::isfinite(r.time_us), GE2_ERROR_TUNEDB,
            "tunedb: row has time_us = {}", r.time_us);
    return r;
  } catch (const nlohmann::json::exception& e) {
    fail(GE2_ERROR_TUNEDB, "tunedb: malformed record: {}", e.what());
  }
}

}  // namespace ge2
