#include "tunedb/tunedb_access.hpp"

#include <cstdio>
#include <filesystem>

#include "core/error.hpp"
#include "core/log.hpp"

namespace ge2 {

TuneDbAccess::TuneDbAccess(const std::string& path, bool tuning, const Logger& logger)
    : path_(path), logger_(logger) {
  if (path.empty()) return;
  std::error_code error;
  const bool exists = std::filesystem::exists(path, error);
  if (tuning) {
    try {
      db_ = std::make_unique<TuneDb>(path, TuneDb::Mode::ReadWrite);
      return;
    } catch (const Error& write_error) {
      if (!exists) throw;
      // A ge2 database this process cannot write still serves its rows; new
      // results stay in memory. Anything else is refused in tuning mode.
      db_ = std::make_unique<TuneDb>(path, TuneDb::Mode::ReadOnly);
      note_ =
          std::string("not writable, tuning results kept in memory only: ") + write_error.what();
      return;
    }
  }
  if (!exists) {
    note_ = "no database file yet";
    return;
  }
  try {
    db_ = std::make_unique<TuneDb>(path, TuneDb::Mode::ReadOnly);
  } catch (const Error& open_error) {
    degrade(open_error.what());
  }
}

void TuneDbAccess::degrade(const std::string& message) {
  ++errors_;
  note_ = message;
  db_.reset();
  if (!warned_) {
    warned_ = true;
    logger_(LogLevel::Warning, "tuning database not used, falling back to cuBLASLt's heuristic: {}",
            message);
  }
}

template <typename Query, typename Result>
Result TuneDbAccess::guarded(const char* what, Result fallback, Query&& query) {
  if (!db_) return fallback;
  try {
    return query(*db_);
  } catch (const Error& error) {
    degrade(fmt::format("{} failed: {}", what, error.what()));
    return fallback;
  }
}

std::optional<TuneRecord> TuneDbAccess::find_exact(const TuneKey& key) {
  return guarded("look-up", std::optional<TuneRecord>{},
                 [&](TuneDb& db) { return db.find_exact(key); });
}

std::vector<TuneRecord> TuneDbAccess::find_in_bucket(const TuneKey& key) {
  return guarded("bucket look-up", std::vector<TuneRecord>{},
                 [&](TuneDb& db) { return db.find_in_bucket(key); });
}

void TuneDbAccess::store(const TuneRecord& record, TuneDb::Replace replace) {
  if (!writable()) return;
  guarded("storing a tuned result", false, [&](TuneDb& db) { return db.upsert(record, replace); });
}

nlohmann::json TuneDbAccess::describe() const {
  nlohmann::json j{{"tunedb", path_.empty() ? "none" : path_},
                   {"tunedb_open", open()},
                   {"tunedb_writable", writable()},
                   {"tunedb_errors", errors_}};
  if (db_ && db_->immutable()) j["tunedb_immutable"] = true;
  if (!note_.empty()) j["tunedb_note"] = note_;
  return j;
}

}  // namespace ge2
