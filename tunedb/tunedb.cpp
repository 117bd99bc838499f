#include "tunedb/tunedb.hpp"

#include <sqlite3.h>

#include <filesystem>

#include "core/error.hpp"

namespace ge2 {
namespace {

constexpr int kBusyTimeoutMs = 30000;

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &statement_, nullptr) != SQLITE_OK)
      fail(GE2_ERROR_TUNEDB, "tunedb: cannot prepare '{}': {}", sql, sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(statement_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int index, const std::string& value) {
    check(sqlite3_bind_text(statement_, index, value.c_str(), static_cast<int>(value.size()),
                            SQLITE_TRANSIENT));
    return *this;
  }
  Statement& bind(int index, std::int64_t value) {
    check(sqlite3_bind_int64(statement_, index, value));
    return *this;
  }
  Statement& bind(int index, double value) {
    check(sqlite3_bind_double(statement_, index, value));
    return *this;
  }
  // True while a row is available.
  bool step() {
    const int rc = sqlite3_step(statement_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(GE2_ERROR_TUNEDB, "tunedb: {}", sqlite3_errmsg(db_));
  }
  std::string text(int column) const {
    const auto* p = sqlite3_column_text(statement_, column);
    return p ? reinterpret_cast<const char*>(p) : "";
  }
  std::int64_t integer(int column) const { return sqlite3_column_int64(statement_, column); }
  double real(int column) const { return sqlite3_column_double(statement_, column); }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail(GE2_ERROR_TUNEDB, "tunedb: bind failed: {}", sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  sqlite3_stmt* statement_ = nullptr;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back if the scope exits by exception.
class WriteTransaction {
 public:
  explicit WriteTransaction(sqlite3* db) : db_(db) { run("BEGIN IMMEDIATE"); }
  ~WriteTransaction() {
    if (!committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    run("COMMIT");
    committed_ = true;
  }

 private:
  void run(const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      std::string text = message ? message : sqlite3_errmsg(db_);
      sqlite3_free(message);
      fail(GE2_ERROR_TUNEDB, "tunedb: {} failed: {}", sql, text);
    }
  }
  sqlite3* db_;
  bool committed_ = false;
};

constexpr const char* kColumns =
    "device, cublaslt_version, kernel, signature, m, n, k, batch, algo_json, workspace_bytes, "
    "time_us, "
    "heuristic_time_us, gflops, created_at, ge2_version";

TuneRecord read_row(const Statement& s) {
  TuneRecord r;
  r.key.device = s.text(0);
  r.key.cublaslt_version = s.integer(1);
  r.key.kernel = s.text(2);
  r.key.signature = s.text(3);
  r.key.m = s.integer(4);
  r.key.n = s.integer(5);
  r.key.k = s.integer(6);
  r.key.batch = s.integer(7);
  r.algo = nlohmann::json::parse(s.text(8), nullptr, false);
  r.workspace_bytes = s.integer(9);
  r.time_us = s.real(10);
  r.heuristic_time_us = s.real(11);
  r.gflops = s.real(12);
  r.created_at = s.text(13);
  r.ge2_version = s.text(14);
  return r;
}

}  // namespace

void TuneDb::Closer::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

TuneDb::TuneDb(const std::string& path, Mode mode) : path_(path), mode_(mode) {
  require(!path.empty(), GE2_ERROR_TUNEDB, "tunedb: empty path");
  if (mode == Mode::ReadWrite) {
    const auto parent = std::filesystem::path(path).parent_path();
    std::error_code error;
    if (!parent.empty()) std::filesystem::create_directories(parent, error);
    require(!error, GE2_ERROR_TUNEDB, "tunedb: cannot create directory '{}': {}", parent.string(),
            error.message());
  }
  sqlite3* raw = nullptr;
  const int flags = (mode == Mode::ReadWrite ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                                             : SQLITE_OPEN_READONLY) |
                    SQLITE_OPEN_FULLMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  db_.reset(raw);
  require(rc == SQLITE_OK, GE2_ERROR_TUNEDB, "tunedb: cannot open '{}' {}: {}", path,
          mode == Mode::ReadWrite ? "for writing" : "for reading",
          raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
  sqlite3_busy_timeout(raw, kBusyTimeoutMs);
  // Reading the schema version touches the file header: a corrupt file fails here.
  const int version = schema_version();
  if (mode == Mode::ReadWrite) {
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    migrate();
  } else {
    require(version == kSchemaVersion, GE2_ERROR_TUNEDB,
            "tunedb: '{}' has schema version {}, this ge2 reads {} (open it once for writing to "
            "migrate)",
            path, version, kSchemaVersion);
  }
}

TuneDb::~TuneDb() = default;

void TuneDb::exec(const char* sql) const {
  char* message = nullptr;
  if (sqlite3_exec(db_.get(), sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errmsg(db_.get());
    sqlite3_free(message);
    fail(GE2_ERROR_TUNEDB, "tunedb: '{}' failed on '{}': {}", sql, path_, text);
  }
}

int TuneDb::schema_version() const {
  Statement s(db_.get(), "PRAGMA user_version");
  return s.step() ? static_cast<int>(s.integer(0)) : 0;
}

void TuneDb::migrate() {
  WriteTransaction transaction(db_.get());
  const int version = schema_version();
  require(version <= kSchemaVersion, GE2_ERROR_TUNEDB,
          "tunedb: '{}' has schema version {}, newer than this ge2 ({}); refusing to touch it",
          path_, version, kSchemaVersion);
  if (version < 1) {
    exec(
        "CREATE TABLE IF NOT EXISTS tuned_algo ("
        " device TEXT NOT NULL, cublaslt_version INTEGER NOT NULL, kernel TEXT NOT NULL,"
        " signature TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,"
        " batch INTEGER NOT NULL, m_bucket INTEGER NOT NULL, n_bucket INTEGER NOT NULL,"
        " k_bucket INTEGER NOT NULL, algo_json TEXT NOT NULL, workspace_bytes INTEGER NOT NULL,"
        " time_us REAL NOT NULL, gflops REAL NOT NULL DEFAULT 0, created_at TEXT NOT NULL,"
        " ge2_version TEXT NOT NULL,"
        " PRIMARY KEY (device, cublaslt_version, kernel, signature, m, n, k, batch))");
    exec(
        "CREATE INDEX IF NOT EXISTS tuned_algo_bucket ON tuned_algo"
        " (device, cublaslt_version, kernel, signature, batch, m_bucket, n_bucket, k_bucket)");
  }
  if (version < 2) {
    // Version 2 keeps the heuristic's time beside the winner's, for the gain table.
    exec("ALTER TABLE tuned_algo ADD COLUMN heuristic_time_us REAL NOT NULL DEFAULT 0");
  }
  if (version != kSchemaVersion)
    exec(("PRAGMA user_version = " + std::to_string(kSchemaVersion)).c_str());
  transaction.commit();
}

std::optional<TuneRecord> TuneDb::find_exact(const TuneKey& key) const {
  Statement s(
      db_.get(),
      (std::string("SELECT ") + kColumns +
       " FROM tuned_algo WHERE device=?1 AND cublaslt_version=?2 AND kernel=?3 AND signature=?4"
       " AND m=?5 AND n=?6 AND k=?7 AND batch=?8")
          .c_str());
  s.bind(1, key.device).bind(2, key.cublaslt_version).bind(3, key.kernel).bind(4, key.signature);
  s.bind(5, key.m).bind(6, key.n).bind(7, key.k).bind(8, key.batch);
  if (!s.step()) return std::nullopt;
  return read_row(s);
}

std::vector<TuneRecord> TuneDb::find_in_bucket(const TuneKey& key) const {
  Statement s(
      db_.get(),
      (std::string("SELECT ") + kColumns +
       " FROM tuned_algo WHERE device=?1 AND cublaslt_version=?2 AND kernel=?3 AND signature=?4"
       " AND batch=?5 AND m_bucket=?6 AND n_bucket=?7 AND k_bucket=?8"
       " ORDER BY abs(m-?9) + abs(n-?10) + abs(k-?11) LIMIT 8")
          .c_str());
  s.bind(1, key.device)
      .bind(2, key.cublaslt_version)
      .bind(3, key.kernel)
      .bind(4, key.signature)
      .bind(5, key.batch);
  s.bind(6, size_bucket(key.m)).bind(7, size_bucket(key.n)).bind(8, size_bucket(key.k));
  s.bind(9, key.m).bind(10, key.n).bind(11, key.k);
  std::vector<TuneRecord> rows;
  while (s.step()) rows.push_back(read_row(s));
  return rows;
}

bool TuneDb::upsert(const TuneRecord& r) {
  require(writable(), GE2_ERROR_TUNEDB, "tunedb: '{}' is open read-only", path_);
  WriteTransaction transaction(db_.get());
  Statement s(
      db_.get(),
      "INSERT INTO tuned_algo (device, cublaslt_version, kernel, signature, m, n, k, batch, "
      "m_bucket,"
      " n_bucket, k_bucket, algo_json, workspace_bytes, time_us, heuristic_time_us, gflops, "
      "created_at,"
      " ge2_version) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18)"
      " ON CONFLICT (device, cublaslt_version, kernel, signature, m, n, k, batch) DO UPDATE SET"
      " algo_json=excluded.algo_json, workspace_bytes=excluded.workspace_bytes, "
      "time_us=excluded.time_us,"
      " heuristic_time_us=excluded.heuristic_time_us, gflops=excluded.gflops,"
      " created_at=excluded.created_at, ge2_version=excluded.ge2_version"
      " WHERE excluded.time_us < tuned_algo.time_us");
  s.bind(1, r.key.device)
      .bind(2, r.key.cublaslt_version)
      .bind(3, r.key.kernel)
      .bind(4, r.key.signature);
  s.bind(5, r.key.m).bind(6, r.key.n).bind(7, r.key.k).bind(8, r.key.batch);
  s.bind(9, size_bucket(r.key.m)).bind(10, size_bucket(r.key.n)).bind(11, size_bucket(r.key.k));
  s.bind(12, r.algo.dump())
      .bind(13, r.workspace_bytes)
      .bind(14, r.time_us)
      .bind(15, r.heuristic_time_us);
  s.bind(16, r.gflops).bind(17, r.created_at).bind(18, r.ge2_version);
  s.step();
  const bool changed = sqlite3_changes(db_.get()) > 0;
  transaction.commit();
  return changed;
}

std::vector<TuneRecord> TuneDb::list(const Filter& filter) const {
  Statement s(
      db_.get(),
      (std::string("SELECT ") + kColumns +
       " FROM tuned_algo WHERE instr(device, ?1) > 0 AND (?2 = '' OR kernel = ?2)"
       " AND (?3 < 0 OR cublaslt_version = ?3) ORDER BY device, kernel, signature, batch, m, n, k")
          .c_str());
  s.bind(1, filter.device_contains)
      .bind(2, filter.kernel)
      .bind(3, filter.cublaslt_version.value_or(-1));
  std::vector<TuneRecord> rows;
  while (s.step()) rows.push_back(read_row(s));
  return rows;
}

int TuneDb::prune(const std::string& keep_device, std::int64_t keep_cublaslt_version) {
  require(writable(), GE2_ERROR_TUNEDB, "tunedb: '{}' is open read-only", path_);
  WriteTransaction transaction(db_.get());
  Statement s(db_.get(), "DELETE FROM tuned_algo WHERE device != ?1 OR cublaslt_version != ?2");
  s.bind(1, keep_device).bind(2, keep_cublaslt_version);
  s.step();
  const int removed = sqlite3_changes(db_.get());
  transaction.commit();
  return removed;
}

std::int64_t TuneDb::count() const {
  Statement s(db_.get(), "SELECT count(*) FROM tuned_algo");
  return s.step() ? s.integer(0) : 0;
}

}  // namespace ge2
