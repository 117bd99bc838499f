// The tuning database as JSON Lines, one row per line: what `ge_tune export`
// writes and `ge_tune import` reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tunedb/tunedb.hpp"

namespace ge2 {

// Parses one line into a validated record. Throws GE2_ERROR_TUNEDB with a
// message that starts with `where` ("file:line") and names the field; an object
// that repeats a key is refused, not read as its last value.
TuneRecord parse_jsonl_record(const std::string& line, const std::string& where);

// Reads and validates every line of `path` (empty lines are skipped); a key
// repeated on two lines is refused. Throws on the first bad line, having
// stored nothing.
std::vector<TuneRecord> read_jsonl(const std::string& path);

struct ImportResult {
  std::int64_t rows = 0;     // rows read
  std::int64_t changed = 0;  // rows stored or improved (the faster measurement wins)
};
// read_jsonl, then every row stored in one transaction: all or nothing.
ImportResult import_jsonl(TuneDb& db, const std::string& path);

// Writes every row of `db` to `path` and returns the count. A regular file (or
// a new one) is written beside the target under a temporary name, checked at
// every write, flushed to disk and renamed over it, so a failure (a full disk)
// leaves the old file as it was. Anything else (a pipe, /dev/full) is written
// in place, every write and the close checked.
std::int64_t export_jsonl(const TuneDb& db, const std::string& path);

}  // namespace ge2
