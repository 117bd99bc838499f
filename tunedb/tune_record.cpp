#include "tunedb/tune_record.hpp"

#include <fmt/format.h>

#include <climits>
#include <cmath>

#include "core/error.hpp"
#include "core/tensor_type.hpp"

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

namespace {

const nlohmann::json& field(const nlohmann::json& j, const char* name, const std::string& where) {
  require(j.is_object(), GE2_ERROR_TUNEDB, "{}: a record must be a JSON object, not {}", where,
          j.type_name());
  const auto it = j.find(name);
  require(it != j.end(), GE2_ERROR_TUNEDB, "{}: field '{}' is missing", where, name);
  return *it;
}

// An integral JSON number in [low, high]: 51.9, 1e30 and 2^64-1 are refused,
// never rounded or wrapped.
std::int64_t integer_field(const nlohmann::json& j, const char* name, std::int64_t low,
                           std::int64_t high, const std::string& where) {
  const nlohmann::json& value = field(j, name, where);
  bool in_range = false;
  std::int64_t result = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    in_range = u <= static_cast<std::uint64_t>(high);
    result = in_range ? static_cast<std::int64_t>(u) : 0;
  } else if (value.is_number_integer()) {
    result = value.get<std::int64_t>();
    in_range = true;
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    require(std::isfinite(d) && d == std::floor(d), GE2_ERROR_TUNEDB,
            "{}: field '{}' = {} is not an integer", where, name, value.dump());
    in_range = d >= static_cast<double>(low) && d <= static_cast<double>(high);
    result = in_range ? static_cast<std::int64_t>(d) : 0;
  } else {
    fail(GE2_ERROR_TUNEDB, "{}: field '{}' = {} is not an integer", where, name, value.dump());
  }
  require(in_range && result >= low && result <= high, GE2_ERROR_TUNEDB,
          "{}: field '{}' = {} is outside {}..{}", where, name, value.dump(), low, high);
  return result;
}

double number_field(const nlohmann::json& j, const char* name, double low, bool low_inclusive,
                    const std::string& where) {
  const nlohmann::json& value = field(j, name, where);
  require(value.is_number(), GE2_ERROR_TUNEDB, "{}: field '{}' = {} is not a number", where, name,
          value.dump());
  const double d = value.get<double>();
  require(std::isfinite(d) && (low_inclusive ? d >= low : d > low), GE2_ERROR_TUNEDB,
          "{}: field '{}' = {} must be finite and {} {}", where, name, value.dump(),
          low_inclusive ? ">=" : ">", low);
  return d;
}

std::string string_field(const nlohmann::json& j, const char* name, bool may_be_empty,
                         const std::string& where) {
  const nlohmann::json& value = field(j, name, where);
  require(value.is_string(), GE2_ERROR_TUNEDB, "{}: field '{}' = {} is not a string", where, name,
          value.dump());
  const auto text = value.get<std::string>();
  require(may_be_empty || !text.empty(), GE2_ERROR_TUNEDB, "{}: field '{}' is empty", where, name);
  return text;
}

}  // namespace

TuneRecord TuneRecord::from_json(const nlohmann::json& j, const std::string& where) {
  TuneRecord r;
  r.key.device = string_field(j, "device", false, where);
  r.key.cublaslt_version = integer_field(j, "cublaslt_version", 0, INT64_MAX, where);
  r.key.kernel = string_field(j, "kernel", false, where);
  r.key.signature = string_field(j, "signature", false, where);
  r.key.m = integer_field(j, "m", 1, kMaxDimension, where);
  r.key.n = integer_field(j, "n", 1, kMaxDimension, where);
  r.key.k = integer_field(j, "k", 1, kMaxDimension, where);
  r.key.batch = integer_field(j, "batch", 1, kMaxDimension, where);
  r.algo = field(j, "algo", where);
  require(r.algo.is_object(), GE2_ERROR_TUNEDB, "{}: field 'algo' = {} is not an object", where,
          r.algo.dump());
  r.workspace_bytes = integer_field(j, "workspace_bytes", 0, kMaxElements, where);
  r.time_us = number_field(j, "time_us", 0.0, false, where);
  // Optional fields, as files of earlier versions lack them.
  if (j.contains("heuristic_time_us"))
    r.heuristic_time_us = number_field(j, "heuristic_time_us", 0.0, true, where);
  if (j.contains("gflops")) r.gflops = number_field(j, "gflops", 0.0, true, where);
  if (j.contains("created_at")) r.created_at = string_field(j, "created_at", true, where);
  if (j.contains("ge2_version")) r.ge2_version = string_field(j, "ge2_version", true, where);
  return r;
}

}  // namespace ge2
