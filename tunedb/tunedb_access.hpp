// A context's use of the tuning database. In tuning mode the database is part
// of the request: failing to open it is an error. Otherwise it is a cache:
// whatever goes wrong with the file (missing, unreadable, corrupt, foreign,
// another schema version, an error in a later query) makes it "no database",
// with one warning on stderr and a count in the context's description, and
// callers fall back to cuBLASLt's heuristic. Not thread-safe: the owner locks.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/log.hpp"

#include "tunedb/tunedb.hpp"

namespace ge2 {

class TuneDbAccess {
 public:
  // `path` empty: no database. `tuning`: the context tunes and stores results;
  // throws GE2_ERROR_TUNEDB when the file cannot be created or is not a ge2
  // database (an existing ge2 database that is not writable is read only).
  // `logger` reports the degradation to "no database" (once).
  TuneDbAccess(const std::string& path, bool tuning, const Logger& logger = Logger());

  bool open() const { return db_ != nullptr; }
  bool writable() const { return db_ && db_->writable(); }

  std::optional<TuneRecord> find_exact(const TuneKey& key);
  std::vector<TuneRecord> find_in_bucket(const TuneKey& key);
  // Stores a tuned result when the database is writable; a failure keeps the
  // result in memory only (warned once, counted).
  void store(const TuneRecord& record, TuneDb::Replace replace = TuneDb::Replace::IfFaster);

  int errors() const { return errors_; }
  nlohmann::json describe() const;

 private:
  template <typename Query, typename Result>
  Result guarded(const char* what, Result fallback, Query&& query);
  void degrade(const std::string& message);

  std::string path_;
  Logger logger_;
  std::unique_ptr<TuneDb> db_;
  std::string note_;
  int errors_ = 0;
  bool warned_ = false;
};

}  // namespace ge2
