// libFuzzer target: JSON Lines import into the tuning database. Every line is
// parsed and validated; valid records are stored (all in one transaction) and
// read back by key. Any crash, sanitizer report, or a stored row that does not
// read back equal to what was imported is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "support/scratch_dir.hpp"
#include "tunedb/tunedb.hpp"
#include "tunedb/tunedb_jsonl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // In a scratch directory that goes at exit (the database is closed before it).
  static ge2::TuneDb db((ge2::test::scratch_subdir("fuzz-tunedb") / "tunedb.sqlite").string(),
                        ge2::TuneDb::Mode::ReadWrite);
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<ge2::TuneRecord> records;
  std::size_t begin = 0;
  for (int line = 1; begin <= text.size(); ++line) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    try {
      records.push_back(
          ge2::parse_jsonl_record(text.substr(begin, end - begin), "fuzz:" + std::to_string(line)));
    } catch (const ge2::Error&) {
      // Refused with a message: the expected outcome for most inputs.
    }
    begin = end + 1;
  }
  try {
    db.upsert_all(records);
  } catch (const ge2::Error&) {
    return 0;  // e.g. the same key twice in one batch is fine for SQLite; errors must be statuses
  }
  for (const auto& record : records) {
    const auto row = db.find_exact(record.key);
    if (!row || !(row->key == record.key) || !(row->time_us <= record.time_us)) std::abort();
  }
  return 0;
}
