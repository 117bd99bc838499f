// The GEMM problems a workload compiled, one JSON object per line, for
// `ge_tune tune --from-recorded FILE` to tune later (PyTorch TunableOp's record
// mode, for ge2): a context created while $GE2_TUNE_RECORD names a file appends
// the problem of every GEMM each plan it compiles selects a kernel for.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/kernel_problems.hpp"

namespace ge2 {

// A graph tensor as the record stores it: dims and element strides.
struct RecordedTensor {
  std::vector<std::int64_t> shape, strides;
};

// What ge_tune needs to rebuild a graph whose plan poses the same problem: A, B,
// C and D as graph tensors, the GEMM's attributes, the epilogue. A gated unit
// (`gated`) is act(x·Wgᵀ) ⊙ (x·Wuᵀ) with constant weights: `b` is the joined
// [2I, K] weight, `d` the unit's [M, I] output.
struct RecordedGemm {
  DType dtype = DType::F16;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  RecordedTensor a, b, d;
  std::optional<RecordedTensor> c;
  bool bias = false;
  Activation act = Activation::None;
  std::optional<Activation> gated;
};

// The record of a problem the selector was asked about.
RecordedGemm record_of(const GemmProblem& problem);
// The record's line, "ge2_gemm_record" (the version) its first key.
nlohmann::ordered_json to_json(const RecordedGemm& record);

// Appends one line per record in a single write to a file opened O_APPEND, so
// lines of processes recording at once do not interleave. The file must be new,
// empty or a record file (its first line a record); anything else — another
// program's file, a directory, a device — is left untouched and refused with
// GE2_ERROR_INVALID_ARGUMENT naming it.
void append_gemm_records(const std::string& path, const std::vector<RecordedGemm>& records);

// Every record of `path` (empty lines skipped, a line repeated later read once),
// validated; throws GE2_ERROR_INVALID_ARGUMENT "path:line: ..." naming the field
// of the first bad line.
std::vector<RecordedGemm> read_gemm_records(const std::string& path);

}  // namespace ge2
