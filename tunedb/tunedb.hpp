// The tuning database: one SQLite file shared by many processes.
//
// Concurrency: WAL journal, a busy timeout, and every write in a BEGIN
// IMMEDIATE transaction, so concurrent tuners serialise their writes and
// readers never block. An upsert keeps the faster of two measurements, unless
// told that the stored one was unusable.
// Schema changes are versioned with PRAGMA user_version and migrated forward.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tunedb/tune_record.hpp"

struct sqlite3;

namespace ge2 {

class TuneDb {
 public:
  enum class Mode { ReadOnly, ReadWrite };
  static constexpr int kSchemaVersion = 2;
  // PRAGMA application_id of ge2 tuning databases: "ge2T".
  static constexpr std::int64_t kApplicationId = 0x67653254;

  // Opens (and in ReadWrite mode creates, with its parent directory) the file.
  // Throws GE2_ERROR_TUNEDB with SQLite's message on failure, a corrupt file,
  // or a file that is not a ge2 tuning database of a known schema version;
  // such a file is not written to. ReadOnly works on a WAL file in a read-only
  // directory (read as immutable).
  TuneDb(const std::string& path, Mode mode);
  ~TuneDb();
  TuneDb(const TuneDb&) = delete;
  TuneDb& operator=(const TuneDb&) = delete;

  const std::string& path() const { return path_; }
  bool writable() const { return mode_ == Mode::ReadWrite; }
  bool immutable() const { return immutable_; }  // read without locks (see the constructor)
  int schema_version() const;

  std::optional<TuneRecord> find_exact(const TuneKey& key) const;
  // The tuned entry of the same signature whose sizes fall in the key's buckets,
  // nearest in size first.
  std::vector<TuneRecord> find_in_bucket(const TuneKey& key) const;
  // What an upsert does to an existing row of the same key.
  enum class Replace {
    IfFaster,  // keep the faster of two measurements (two processes tuning one key)
    Always,    // the stored row was found unusable (stale configuration, rejected algorithm)
  };
  // Inserts, or replaces an existing row as `replace` says. Returns whether the
  // stored row changed.
  bool upsert(const TuneRecord& record, Replace replace = Replace::IfFaster);
  // Upserts every record in one transaction (all or nothing); returns how many
  // stored rows changed.
  std::int64_t upsert_all(const std::vector<TuneRecord>& records);

  struct Filter {
    std::string device_contains, kernel;
    std::optional<std::int64_t> cublaslt_version;
  };
  std::vector<TuneRecord> list(const Filter& filter = {}) const;
  // Deletes rows of other devices or cuBLASLt versions than given; returns the count.
  int prune(const std::string& keep_device, std::int64_t keep_cublaslt_version);
  std::int64_t count() const;

 private:
  struct Closer {
    void operator()(sqlite3* db) const;
  };
  void open(int flags, const std::string& name);
  void create_file();
  void check_file_header() const;
  int recognise() const;
  int recognise_schema() const;
  std::int64_t pragma_integer(const char* name) const;
  void migrate();
  void exec(const char* sql) const;
  bool upsert_row(const TuneRecord& record, Replace replace);  // in the caller's transaction

  std::string path_;
  Mode mode_;
  bool immutable_ = false;
  std::unique_ptr<sqlite3, Closer> db_;
};

}  // namespace ge2
