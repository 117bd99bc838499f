#include "tunedb/tunedb.hpp"

#include <sqlite3.h>

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "tunedb/tunedb_path.hpp"

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

namespace {

// SQLite's URI syntax for a file name: the characters that end or escape a path
// component are percent-encoded.
std::string sqlite_uri(const std::string& path, const char* query) {
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#' || static_cast<unsigned char>(c) < 0x20)
      uri += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else
      uri += c;
  }
  return uri + "?" + query;
}

// A read-only connection to a WAL database fails in a read-only directory
// (SQLite cannot create the -shm file there): the shape of a database shipped
// for many users. Such a file cannot be changed by anyone who cannot write the
// directory either, so it is read as immutable.
bool needs_immutable_read(int extended_code) {
  return (extended_code & 0xff) == SQLITE_READONLY || (extended_code & 0xff) == SQLITE_CANTOPEN;
}

// The fields of an SQLite file's 100-byte header that say whose database it
// is, read without SQLite: opening a foreign WAL database, even to read it,
// would leave -wal and -shm files beside it.
struct FileHeader {
  std::uint32_t user_version = 0, application_id = 0;
};

std::uint32_t big_endian_u32(const unsigned char* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

// Closes a descriptor on scope exit.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { ::close(fd_); }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

 private:
  int fd_;
};

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

// Opened without blocking and refused unless a regular file: opening a FIFO
// for reading waits for a writer, so a tuning database path naming one would
// hang ge2_context_create (and a device or a directory is no database either).
FileHeader read_file_header(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  require(fd >= 0, GE2_ERROR_TUNEDB, "tunedb: cannot read '{}': {}", path, std::strerror(errno));
  const FileDescriptor file(fd);
  struct stat status {};
  require(::fstat(fd, &status) == 0, GE2_ERROR_TUNEDB, "tunedb: cannot read '{}': {}", path,
          std::strerror(errno));
  require(S_ISREG(status.st_mode), GE2_ERROR_TUNEDB,
          "tunedb: '{}' is not a ge2 tuning database ({}); ge2 leaves it "
          "untouched",
          path, file_type_name(status.st_mode));
  unsigned char header[100] = {};
  const ssize_t read = ::pread(fd, header, sizeof header, 0);
  static constexpr char kMagic[] = "SQLite format 3";  // with its terminating NUL: 16 bytes
  require(read == static_cast<ssize_t>(sizeof header) &&
              std::memcmp(header, kMagic, sizeof kMagic) == 0,
          GE2_ERROR_TUNEDB,
          "tunedb: '{}' is not a ge2 tuning database (not an SQLite file); ge2 leaves it "
          "untouched",
          path);
  return {big_endian_u32(header + 60), big_endian_u32(header + 68)};
}

}  // namespace

TuneDb::TuneDb(const std::string& path, Mode mode) : path_(path), mode_(mode) {
  require(!path.empty(), GE2_ERROR_TUNEDB, "tunedb: empty path");
  std::error_code error;
  const bool exists = std::filesystem::exists(path, error);
  require(exists || mode == Mode::ReadWrite, GE2_ERROR_TUNEDB, "tunedb: '{}' {}", path,
          error ? fmt::format("cannot be looked at: {}", error.message())
                : "does not exist (a tuning run creates it: ge_tune tune, or a context in "
                  "GE2_TUNE_TUNE mode)");
  if (!exists) {
    create_file();
  } else {
    check_file_header();
    open(mode == Mode::ReadWrite ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY, path);
  }
  // Nothing is written before the file is known to be a ge2 tuning database:
  // a file ge2 does not recognise stays byte-for-byte as it was.
  int version = 0;
  try {
    version = recognise();
  } catch (const Error&) {
    if (mode != Mode::ReadOnly || !needs_immutable_read(sqlite3_extended_errcode(db_.get()))) throw;
    open(SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, sqlite_uri(path, "immutable=1"));
    immutable_ = true;
    version = recognise();
  }
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

void TuneDb::open(int flags, const std::string& name) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(name.c_str(), &raw, flags | SQLITE_OPEN_FULLMUTEX, nullptr);
  db_.reset(raw);
  require(rc == SQLITE_OK, GE2_ERROR_TUNEDB, "tunedb: cannot open '{}' {}: {}", path_,
          (flags & SQLITE_OPEN_READWRITE) ? "for writing" : "for reading",
          raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
  sqlite3_busy_timeout(raw, kBusyTimeoutMs);
}

// A new database is built complete under a temporary name and then linked into
// place, so that the path never shows a half-made file, and a file another
// process created meanwhile is opened, never replaced.
void TuneDb::create_file() {
  const std::filesystem::path target(path_);
  std::error_code error;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), error);
  require(!error, GE2_ERROR_TUNEDB, "tunedb: cannot create directory '{}': {}",
          target.parent_path().string(), error.message());
  // A fresh, exclusively created name: nothing that already exists is reused or removed.
  std::string temporary = path_ + ".new-XXXXXX";
  const int fd = ::mkostemp(temporary.data(), O_CLOEXEC);
  require(fd >= 0, GE2_ERROR_TUNEDB, "tunedb: cannot create a file beside '{}': {}", path_,
          std::strerror(errno));
  const bool mode_set = ::fchmod(fd, new_file_mode()) == 0;
  ::close(fd);
  try {
    require(mode_set, GE2_ERROR_TUNEDB, "tunedb: cannot set the mode of '{}': {}", temporary,
            std::strerror(errno));
    open(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, temporary);
    exec("PRAGMA journal_mode=WAL");
    migrate();
    db_.reset();  // closing checkpoints the WAL into the file and removes -wal/-shm
  } catch (...) {
    db_.reset();
    std::filesystem::remove(temporary, error);
    throw;
  }
  const int linked = link(temporary.c_str(), path_.c_str());
  const int link_error = errno;
  std::filesystem::remove(temporary, error);
  require(linked == 0 || link_error == EEXIST, GE2_ERROR_TUNEDB, "tunedb: cannot create '{}': {}",
          path_, std::strerror(link_error));
  open(SQLITE_OPEN_READWRITE, path_);
}

// Refuses, before SQLite opens the file, anything that cannot be a ge2 tuning
// database: ge2's application id, or no id with the schema versions of ge2 2.0
// and 2.1, which set none (recognise() then looks at the tables).
void TuneDb::check_file_header() const {
  const FileHeader header = read_file_header(path_);
  const bool maybe_ours =
      header.application_id == kApplicationId ||
      (header.application_id == 0 && header.user_version >= 1 && header.user_version <= 2);
  require(maybe_ours, GE2_ERROR_TUNEDB,
          "tunedb: '{}' is not a ge2 tuning database (application_id {}, user_version {}); ge2 "
          "leaves it untouched",
          path_, header.application_id, header.user_version);
}

// The schema version of a ge2 tuning database, or GE2_ERROR_TUNEDB for
// anything else: another application's database, a newer ge2's, or not a
// database at all. Reads only.
int TuneDb::recognise() const {
  try {
    return recognise_schema();
  } catch (const Error& error) {
    const std::string message = error.what();
    if (message.find(path_) != std::string::npos) throw;
    fail(GE2_ERROR_TUNEDB, "tunedb: '{}': {}", path_, message.substr(message.find(' ') + 1));
  }
}

int TuneDb::recognise_schema() const {
  const std::int64_t application = pragma_integer("application_id");
  const int version = schema_version();
  std::vector<std::string> tables;
  {
    Statement s(db_.get(), "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
    while (s.step()) tables.push_back(s.text(0));
  }
  // Files of ge2 2.0 and 2.1 carry no application id: their one table says who made them.
  const bool ours =
      application == kApplicationId || (application == 0 && version >= 1 && version <= 2 &&
                                        tables == std::vector<std::string>{"tuned_algo"});
  require(ours, GE2_ERROR_TUNEDB,
          "tunedb: '{}' is not a ge2 tuning database (application_id {}, user_version {}, "
          "{} table(s){}{}); ge2 leaves it untouched",
          path_, application, version, tables.size(), tables.empty() ? "" : ": ",
          fmt::join(tables, ", "));
  require(version >= 1 && version <= kSchemaVersion, GE2_ERROR_TUNEDB,
          "tunedb: '{}' has schema version {}, this ge2 knows 1 to {}; ge2 leaves it untouched",
          path_, version, kSchemaVersion);
  return version;
}

std::int64_t TuneDb::pragma_integer(const char* name) const {
  Statement s(db_.get(), (std::string("PRAGMA ") + name).c_str());
  return s.step() ? s.integer(0) : 0;
}

void TuneDb::exec(const char* sql) const {
  char* message = nullptr;
  if (sqlite3_exec(db_.get(), sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errmsg(db_.get());
    sqlite3_free(message);
    fail(GE2_ERROR_TUNEDB, "tunedb: '{}' failed on '{}': {}", sql, path_, text);
  }
}

int TuneDb::schema_version() const { return static_cast<int>(pragma_integer("user_version")); }

void TuneDb::migrate() {
  WriteTransaction transaction(db_.get());
  // Read again inside the write lock: another process may have migrated meanwhile.
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
  if (pragma_integer("application_id") != kApplicationId)
    exec(("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
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

bool TuneDb::upsert(const TuneRecord& record, Replace replace) {
  require(writable(), GE2_ERROR_TUNEDB, "tunedb: '{}' is open read-only", path_);
  WriteTransaction transaction(db_.get());
  const bool changed = upsert_row(record, replace);
  transaction.commit();
  return changed;
}

std::int64_t TuneDb::upsert_all(const std::vector<TuneRecord>& records) {
  require(writable(), GE2_ERROR_TUNEDB, "tunedb: '{}' is open read-only", path_);
  WriteTransaction transaction(db_.get());
  std::int64_t changed = 0;
  for (const auto& record : records) changed += upsert_row(record, Replace::IfFaster) ? 1 : 0;
  transaction.commit();
  return changed;
}

bool TuneDb::upsert_row(const TuneRecord& r, Replace replace) {
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
      " WHERE ?19 OR excluded.time_us < tuned_algo.time_us");
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
  s.bind(19, std::int64_t{replace == Replace::Always ? 1 : 0});
  s.step();
  return sqlite3_changes(db_.get()) > 0;
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
