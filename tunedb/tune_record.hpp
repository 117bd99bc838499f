// One row of the tuning database: a GEMM problem key and the measured winner.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace ge2 {

// What identifies a tuned problem. `signature` holds everything but the sizes
// (dtype, operand order, epilogue, C, alignment class), so one signature with
// many sizes can be searched by size bucket.
struct TuneKey {
  std::string device;  // "NVIDIA H200|sm90|132"
  std::int64_t cublaslt_version = 0;
  std::string kernel;  // "lt_f16", ...
  std::string signature;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;

  std::string to_string() const;
  bool operator==(const TuneKey&) const = default;
};

// The documented bucketing rule for looking up untuned sizes: up to 256 a
// dimension rounds up to a power of two (1, 2, 4, ... 256); above, up to a
// multiple of 256.
std::int64_t size_bucket(std::int64_t size);

struct TuneRecord {
  TuneKey key;
  nlohmann::json algo;  // the algorithm's configuration attributes
  std::int64_t workspace_bytes = 0;
  double time_us = 0;            // median time of the winner
  double heuristic_time_us = 0;  // median time of cuBLASLt's heuristic top-1, same run
  double gflops = 0;
  std::string created_at;  // ISO 8601 UTC
  std::string ge2_version;

  nlohmann::json to_json() const;
  // Validates every field: sizes are integers within ge2's dimension limit,
  // times finite and positive, strings non-empty. Throws GE2_ERROR_TUNEDB with
  // a message that starts with `where` (e.g. "rows.jsonl:51") and names the field.
  static TuneRecord from_json(const nlohmann::json& j, const std::string& where = "tunedb record");
};

}  // namespace ge2
