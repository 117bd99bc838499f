// libFuzzer target: the GEMM record file ge_tune --from-recorded reads. Every line
// is parsed and validated; a file with a bad line is refused with a status. A
// valid file's records, appended to a new record file and read back, must be the
// same records. Any crash, sanitizer report or difference is a finding.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "support/scratch_dir.hpp"
#include "tunedb/gemm_record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = ge2::test::scratch_subdir("fuzz-gemm-record").string();
  const std::string input = dir + "/input.jsonl", again = dir + "/again.jsonl";
  std::ofstream(input, std::ios::binary)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  std::vector<ge2::RecordedGemm> records;
  try {
    records = ge2::read_gemm_records(input);
  } catch (const ge2::Error& error) {
    if (error.status() != GE2_ERROR_INVALID_ARGUMENT) std::abort();
    return 0;  // refused with a message: the expected outcome for most inputs
  }
  if (records.empty()) return 0;
  std::filesystem::remove(again);
  ge2::append_gemm_records(again, records);
  const std::vector<ge2::RecordedGemm> read = ge2::read_gemm_records(again);
  // Lines that differ only in spacing or key order are one record once rewritten.
  std::vector<std::string> want, got;
  for (const auto& r : records) want.push_back(ge2::to_json(r).dump());
  for (const auto& r : read) got.push_back(ge2::to_json(r).dump());
  for (const std::string& line : got)
    if (std::find(want.begin(), want.end(), line) == want.end()) std::abort();
  for (const std::string& line : want)
    if (std::find(got.begin(), got.end(), line) == got.end()) std::abort();
  return 0;
}
