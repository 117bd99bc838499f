// The tuning database on the CPU: schema and migration, upsert rules, key
// encoding and bucketing, JSON round trip, bad files, and many processes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "core/error.hpp"
#include "select/selector.hpp"
#include "select/tune_key.hpp"
#include "support/scratch_dir.hpp"
#include "tunedb/tunedb.hpp"
#include "tunedb/tunedb_access.hpp"
#include "tunedb/tunedb_jsonl.hpp"

using namespace ge2;

namespace {

std::string temp_db(const char* name) {
  return (test::scratch_subdir(name) / "tunedb.sqlite").string();
}

TuneRecord record(std::int64_t m, double time_us, const std::string& device = "H200|sm90|132") {
  TuneRecord r;
  r.key = {device, 130100, "lt_f16", "f16 op=NN bias=1 act=relu c=0 align=16", m, 4096, 4096, 1};
  r.algo = {{"algo_id", 66}, {"tile", 313}};
  r.workspace_bytes = 1 << 20;
  r.time_us = time_us;
  r.heuristic_time_us = time_us * 1.1;
  r.gflops = 1000;
  r.created_at = "2026-12-02T00:00:00Z";
  r.ge2_version = "2.0.0";
  return r;
}

}  // namespace

TEST_CASE("tunedb: creates the schema, stores and finds exact rows; the faster measurement wins") {
  const std::string path = temp_db("basic");
  TuneDb db(path, TuneDb::Mode::ReadWrite);
  CHECK(db.schema_version() == TuneDb::kSchemaVersion);
  CHECK(db.count() == 0);
  CHECK(db.upsert(record(4096, 200.0)));
  auto row = db.find_exact(record(4096, 0.1).key);
  REQUIRE(row.has_value());
  CHECK(row->time_us == doctest::Approx(200.0));
  CHECK(row->algo["tile"] == 313);
  CHECK_FALSE(db.upsert(record(4096, 250.0)));  // slower: kept the old row
  CHECK(db.find_exact(record(4096, 0).key)->time_us == doctest::Approx(200.0));
  CHECK(db.upsert(record(4096, 150.0)));  // faster: replaced
  CHECK(db.find_exact(record(4096, 0).key)->time_us == doctest::Approx(150.0));
  CHECK(db.count() == 1);
  CHECK_FALSE(db.find_exact(record(4000, 0).key).has_value());
  // A row found unusable (stale configuration) is replaced by a slower new measurement.
  CHECK(db.upsert(record(4096, 400.0), TuneDb::Replace::Always));
  CHECK(db.find_exact(record(4096, 0).key)->time_us == doctest::Approx(400.0));
  CHECK(db.count() == 1);
}

TEST_CASE("tunedb: bucket look-up finds the nearest tuned size of the same signature") {
  CHECK(size_bucket(1) == 1);
  CHECK(size_bucket(3) == 4);
  CHECK(size_bucket(200) == 256);
  CHECK(size_bucket(257) == 512);
  CHECK(size_bucket(4095) == 4096);
  CHECK(size_bucket(4097) == 4352);
  TuneDb db(temp_db("bucket"), TuneDb::Mode::ReadWrite);
  db.upsert(record(3900, 100.0));
  db.upsert(record(4000, 100.0));
  db.upsert(record(5000, 100.0));  // other bucket
  const auto rows = db.find_in_bucket(record(4050, 0).key);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].key.m == 4000);
  CHECK(rows[1].key.m == 3900);
}

TEST_CASE("tunedb: a version-1 file is migrated forward without losing rows") {
  const std::string path = temp_db("migrate");
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
    const char* v1 =
        "CREATE TABLE tuned_algo (device TEXT NOT NULL, cublaslt_version INTEGER NOT NULL, kernel "
        "TEXT NOT NULL,"
        " signature TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, "
        "batch INTEGER NOT NULL,"
        " m_bucket INTEGER NOT NULL, n_bucket INTEGER NOT NULL, k_bucket INTEGER NOT NULL, "
        "algo_json TEXT NOT NULL,"
        " workspace_bytes INTEGER NOT NULL, time_us REAL NOT NULL, gflops REAL NOT NULL DEFAULT 0,"
        " created_at TEXT NOT NULL, ge2_version TEXT NOT NULL,"
        " PRIMARY KEY (device, cublaslt_version, kernel, signature, m, n, k, batch));"
        "INSERT INTO tuned_algo VALUES ('H200|sm90|132', 130100, 'lt_f16', 'f16 op=NN bias=1 "
        "act=relu c=0 align=16',"
        " 64, 4096, 4096, 1, 64, 4096, 4096, '{\"algo_id\":1}', 0, 12.5, 0, '2026-01-01', '1.9');"
        "PRAGMA user_version = 1;";
    REQUIRE(sqlite3_exec(raw, v1, nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(raw);
  }
  CHECK_THROWS_WITH_AS(TuneDb(path, TuneDb::Mode::ReadOnly), doctest::Contains("schema version 1"),
                       Error);
  TuneDb db(path, TuneDb::Mode::ReadWrite);
  CHECK(db.schema_version() == 2);
  const auto row = db.find_exact(record(64, 0).key);
  REQUIRE(row.has_value());
  CHECK(row->time_us == doctest::Approx(12.5));
  CHECK(row->heuristic_time_us == 0.0);
}

TEST_CASE("tunedb: JSON Lines round trip and malformed records") {
  const TuneRecord r = record(2048, 77.0);
  const TuneRecord back = TuneRecord::from_json(nlohmann::json::parse(r.to_json().dump()));
  CHECK(back.key == r.key);
  CHECK(back.time_us == r.time_us);
  CHECK(back.algo == r.algo);
  CHECK_THROWS_WITH_AS(TuneRecord::from_json({{"device", "x"}}),
                       doctest::Contains("field 'cublaslt_version' is missing"), Error);
  auto bad = r.to_json();
  bad["time_us"] = -1.0;
  CHECK_THROWS_WITH_AS(TuneRecord::from_json(bad), doctest::Contains("time_us"), Error);
}

TEST_CASE(
    "tunedb: corrupt, unreadable and read-only files give GE2_ERROR_TUNEDB and lose nothing") {
  const std::string corrupt = temp_db("corrupt");
  std::ofstream(corrupt)
      << "this is not a database, just text that is long enough to have a header..........";
  try {
    TuneDb db(corrupt, TuneDb::Mode::ReadWrite);
    FAIL("opened a corrupt file");
  } catch (const Error& error) {
    CHECK(error.status() == GE2_ERROR_TUNEDB);
    CHECK(std::string(error.what()).find("tunedb") != std::string::npos);
  }
  CHECK_THROWS_AS(TuneDb("/nonexistent-dir-ge2/x/tunedb.sqlite", TuneDb::Mode::ReadOnly), Error);

  const std::string path = temp_db("readonly");
  {
    TuneDb db(path, TuneDb::Mode::ReadWrite);
    db.upsert(record(1, 1.0));
  }
  TuneDb reader(path, TuneDb::Mode::ReadOnly);
  CHECK_THROWS_WITH_AS(reader.upsert(record(2, 1.0)), doctest::Contains("read-only"), Error);
  CHECK(reader.count() == 1);
}

TEST_CASE("tunedb: prune and list filters") {
  TuneDb db(temp_db("prune"), TuneDb::Mode::ReadWrite);
  db.upsert(record(1, 1.0, "H200|sm90|132"));
  db.upsert(record(2, 1.0, "H100|sm90|132"));
  CHECK(db.list({"H100", "", std::nullopt}).size() == 1);
  CHECK(db.prune("H200|sm90|132", 130100) == 1);
  CHECK(db.count() == 1);
}

TEST_CASE("tunedb: 8 processes writing and reading at once lose no rows") {
  const std::string path = temp_db("concurrent");
  { TuneDb create(path, TuneDb::Mode::ReadWrite); }
  constexpr int kProcesses = 8, kRowsEach = 40;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int status = 0;
      try {
        TuneDb db(path, TuneDb::Mode::ReadWrite);
        for (int i = 0; i < kRowsEach; ++i) {
          db.upsert(record(p * 1000 + i + 1, 10.0 + i));
          db.upsert(record(999999, 100.0 - p - i * 0.01));  // everyone races on one key too
          if (!db.find_exact(record(p * 1000 + i + 1, 0).key)) status = 3;
          (void)db.count();
        }
      } catch (const std::exception& e) {
        fprintf(stderr, "child %d: %s\n", p, e.what());
        status = 2;
      }
      _exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  TuneDb db(path, TuneDb::Mode::ReadOnly);
  CHECK(db.count() == kProcesses * kRowsEach + 1);
  // The shared key holds the fastest of all writes: 100 - 7 - 39*0.01.
  CHECK(db.find_exact(record(999999, 0).key)->time_us == doctest::Approx(100.0 - 7 - 0.39));
}

TEST_CASE("tune keys: sizes, effective operand order, epilogue and alignment class") {
  GemmProblem p;
  p.dtype = DType::F16;
  p.m = 64;
  p.n = 128;
  p.k = 256;
  p.a = {1, 64, 256, 0, 256, 1};
  p.b = {1, 256, 128, 0, 128, 1};
  p.d = {1, 64, 128, 0, 128, 1};
  p.has_bias = true;
  p.act = Activation::GeluTanh;
  const TuneKey key = make_tune_key(p, KernelId::LtF16, synthetic_h200());
  CHECK(key.kernel == "lt_f16");
  CHECK(key.signature == "f16 op=NN bias=1 act=gelu_tanh c=0 align=16");
  CHECK(key.device == "NVIDIA H200 (synthetic)|sm90|132");
  GemmProblem col = p;
  col.a = {1, 64, 256, 0, 1, 64};  // column-major A appears transposed to cuBLASLt
  CHECK(make_tune_key(col, KernelId::LtF16, synthetic_h200()).signature.find("op=TN") !=
        std::string::npos);
  GemmProblem odd = p;
  odd.k = 255;
  odd.a = {1, 64, 255, 0, 255, 1};
  odd.b = {1, 255, 128, 0, 128, 1};
  CHECK(make_tune_key(odd, KernelId::LtF16, synthetic_h200()).signature.find("align=2") !=
        std::string::npos);
  // B's and D's rows of 252 bytes: aligned to 4, a key of its own (rows of 510 bytes are 2).
  odd.a.row_stride = 256;
  odd.b.row_stride = 126;
  odd.d.row_stride = 126;
  CHECK(make_tune_key(odd, KernelId::LtF16, synthetic_h200()).signature.find("align=4") !=
        std::string::npos);
  GemmProblem gated = p;
  gated.act = Activation::None;
  gated.gated = GatedOutput{Activation::Silu, {1, 64, 64, 0, 64, 1}};
  CHECK(make_tune_key(gated, KernelId::CutlassF16Pingpong128, synthetic_h200()).signature ==
        "f16 op=NN bias=1 act=none c=0 align=16 gated=silu");
}

TEST_CASE(
    "tunedb: a writer killed with SIGKILL mid-stream leaves a readable file with every committed "
    "row") {
  const std::string path = temp_db("killed");
  { TuneDb create(path, TuneDb::Mode::ReadWrite); }
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pipe_fds[0]);
    TuneDb db(path, TuneDb::Mode::ReadWrite);
    for (int i = 1;; ++i) {
      db.upsert(record(i, 1.0));
      // Reported only after the commit returned.
      if (write(pipe_fds[1], &i, sizeof(i)) != sizeof(i)) _exit(1);
    }
  }
  close(pipe_fds[1]);
  int committed = 0, value = 0;
  while (committed < 200 && read(pipe_fds[0], &value, sizeof(value)) == sizeof(value))
    committed = value;
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  while (read(pipe_fds[0], &value, sizeof(value)) == sizeof(value)) committed = value;  // drain
  close(pipe_fds[0]);
  CHECK(WIFSIGNALED(status));
  TuneDb db(path, TuneDb::Mode::ReadWrite);  // recovers the WAL of the killed writer
  CHECK(db.count() >= committed);
  for (int i = 1; i <= committed; ++i) REQUIRE(db.find_exact(record(i, 0).key).has_value());
  MESSAGE("rows committed before SIGKILL: " << committed << ", rows found: " << db.count());
}

namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void run_sql(const std::string& path, const char* sql) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
  REQUIRE_MESSAGE(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr) == SQLITE_OK,
                  sqlite3_errmsg(raw));
  sqlite3_close(raw);
}

// Runs `body` in a child process and returns its exit code (`body`'s return).
template <typename Body>
int in_child(Body&& body) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      fprintf(stderr, "child: %s\n", e.what());
      code = 98;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string write_lines(const char* name, const std::vector<std::string>& lines) {
  const std::string path =
      std::filesystem::path(temp_db(name)).replace_filename("rows.jsonl").string();
  std::ofstream out(path);
  for (const auto& line : lines) out << line << "\n";
  return path;
}

}  // namespace

TEST_CASE("tunedb: a file ge2 does not recognise is refused and left byte for byte untouched") {
  struct Case {
    const char* name;
    const char* sql;
    const char* message;
  };
  const Case cases[] = {
      {"foreign", "CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine');",
       "not a ge2 tuning database"},
      {"foreign-wal", "PRAGMA journal_mode=WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1);",
       "not a ge2 tuning database"},
      {"lookalike", "CREATE TABLE tuned_algo (x); CREATE TABLE other (y); PRAGMA user_version=2;",
       "not a ge2 tuning database"},
      {"future",
       "CREATE TABLE tuned_algo (x); PRAGMA user_version = 3; PRAGMA application_id = "
       "1734685268;",
       "schema version 3"},
      {"empty", "", "not a ge2 tuning database"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = temp_db(c.name);
    if (*c.sql)
      run_sql(path, c.sql);
    else
      std::ofstream(path).flush();  // a zero-length file
    const std::string before = file_bytes(path);
    for (auto mode : {TuneDb::Mode::ReadWrite, TuneDb::Mode::ReadOnly}) {
      CHECK_THROWS_WITH_AS(TuneDb(path, mode), doctest::Contains(c.message), Error);
      CHECK(file_bytes(path) == before);
    }
    CHECK_THROWS_AS(TuneDbAccess(path, true), Error);  // tuning mode refuses
    TuneDbAccess cached(path, false);                  // cached mode degrades
    CHECK_FALSE(cached.open());
    CHECK(cached.errors() == 1);
    CHECK(file_bytes(path) == before);
    CHECK_FALSE(std::filesystem::exists(path + "-wal"));
  }
}

TEST_CASE(
    "tunedb: a FIFO, a directory, a device or a missing file as the path is refused without "
    "blocking") {
  const std::filesystem::path dir = test::scratch_subdir("not-regular");
  const std::string fifo = (dir / "fifo.sqlite").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string directory = (dir / "directory.sqlite").string();
  std::filesystem::create_directory(directory);
  struct Case {
    std::string path;
    const char* kind;
  };
  // Opening a FIFO for reading waits for a writer: each open runs aside, and on
  // a hang the write end is opened until the reader sees end of file.
  auto without_blocking = [](const std::string& path, auto open) {
    auto opening = std::async(std::launch::async, open);
    if (opening.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      FAIL_CHECK("blocked opening " << path);
      do ::close(::open(path.c_str(), O_WRONLY | O_NONBLOCK));
      while (opening.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready);
    }
    return opening.get();
  };
  for (const Case& c : {Case{fifo, "(a FIFO)"}, Case{directory, "(a directory)"},
                        Case{"/dev/null", "(a character device)"}}) {
    CAPTURE(c.path);
    for (auto mode : {TuneDb::Mode::ReadWrite, TuneDb::Mode::ReadOnly})
      CHECK_THROWS_WITH_AS(without_blocking(c.path, [&] { TuneDb db(c.path, mode); }),
                           doctest::Contains(c.kind), Error);
    // Tuning mode refuses; cached mode degrades to no database.
    CHECK_THROWS_AS(without_blocking(c.path, [&] { TuneDbAccess tuning(c.path, true); }), Error);
    const auto [open, errors] = without_blocking(c.path, [&] {
      TuneDbAccess cached(c.path, false);
      return std::pair{cached.open(), cached.errors()};
    });
    CHECK_FALSE(open);
    CHECK(errors == 1);
  }
  // Read-only, a missing file is named as such (not SQLite's "unable to open database file").
  const std::string missing = (dir / "missing.sqlite").string();
  CHECK_THROWS_WITH_AS(TuneDb(missing, TuneDb::Mode::ReadOnly),
                       doctest::Contains("missing.sqlite' does not exist"), Error);
  struct stat status {};
  CHECK((::stat(fifo.c_str(), &status) == 0 && S_ISFIFO(status.st_mode)));
  CHECK(std::filesystem::is_empty(directory));
  CHECK(std::distance(std::filesystem::directory_iterator(dir),
                      std::filesystem::directory_iterator()) == 2);  // nothing left beside them
}

TEST_CASE("tunedb: new files carry ge2's application id and appear complete or not at all") {
  const std::string path = temp_db("fresh");
  {
    TuneDb db(path, TuneDb::Mode::ReadWrite);
    db.upsert(record(8, 1.0));
  }
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(raw, "PRAGMA application_id", -1, &s, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(s) == SQLITE_ROW);
  CHECK(sqlite3_column_int64(s, 0) == TuneDb::kApplicationId);
  sqlite3_finalize(s);
  sqlite3_close(raw);
  // Created with the mode open() would give (0666 less the umask), not mkstemp's 0600.
  const mode_t mask = umask(022);
  umask(mask);
  CHECK((std::filesystem::status(path).permissions() & std::filesystem::perms::all) ==
        static_cast<std::filesystem::perms>(0666 & ~mask));
  // No temporary file is left beside it.
  int entries = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    entries += entry.path().filename().string().find(".new-") != std::string::npos;
  CHECK(entries == 0);
}

TEST_CASE("tunedb: a read-only WAL database in a read-only directory is readable by non-root") {
  const std::string path = temp_db("shipped");
  {
    TuneDb db(path, TuneDb::Mode::ReadWrite);
    for (int i = 1; i <= 5; ++i) db.upsert(record(i, 2.0 * i));
  }
  const auto dir = std::filesystem::path(path).parent_path();
  std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
  std::filesystem::permissions(
      dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec |
               std::filesystem::perms::group_read | std::filesystem::perms::group_exec |
               std::filesystem::perms::others_read | std::filesystem::perms::others_exec);
  const std::string before = file_bytes(path);
  const int code = in_child([&] {
    // Root ignores permissions: read as the unprivileged 'nobody' user instead.
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) return 10;
    if (geteuid() == 0) return 11;
    TuneDb db(path, TuneDb::Mode::ReadOnly);
    if (!db.immutable()) return 12;
    if (db.count() != 5) return 13;
    const auto row = db.find_exact(record(3, 0).key);
    if (!row || row->time_us != 6.0) return 14;
    TuneDbAccess cached(path, false);
    if (!cached.open() || cached.errors() != 0 || !cached.find_exact(record(4, 0).key)) return 15;
    return 0;
  });
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  CHECK(code == 0);
  CHECK(file_bytes(path) == before);
}

TEST_CASE("tunedb access: cached mode degrades to no database, tuning mode refuses") {
  const std::string corrupt = temp_db("access-corrupt");
  std::ofstream(corrupt) << std::string(4096, 'x');
  const std::string old_schema = temp_db("access-old");
  run_sql(old_schema, "CREATE TABLE tuned_algo (x); PRAGMA user_version = 1;");
  for (const std::string& path : {corrupt, old_schema}) {
    CAPTURE(path);
    TuneDbAccess cached(path, false);
    CHECK_FALSE(cached.open());
    CHECK(cached.errors() == 1);
    CHECK_FALSE(cached.find_exact(record(1, 0).key).has_value());
    CHECK(cached.find_in_bucket(record(1, 0).key).empty());
    const auto j = cached.describe();
    CHECK(j["tunedb_open"] == false);
    CHECK(j["tunedb_errors"] == 1);
    CHECK(j["tunedb_note"].get<std::string>().find("tunedb") != std::string::npos);
  }
  CHECK_THROWS_AS(TuneDbAccess(corrupt, true), Error);
  // A missing file: no error in cached mode; tuning mode creates it.
  const std::string fresh = temp_db("access-fresh");
  TuneDbAccess absent(fresh, false);
  CHECK_FALSE(absent.open());
  CHECK(absent.errors() == 0);
  TuneDbAccess tuning(fresh, true);
  CHECK(tuning.writable());
  tuning.store(record(7, 3.0));
  CHECK(tuning.find_exact(record(7, 0).key)->time_us == 3.0);
  // A file that becomes unreadable mid-run: the next query degrades.
  const std::string vanishing = temp_db("access-vanishing");
  { TuneDb create(vanishing, TuneDb::Mode::ReadWrite); }
  TuneDbAccess reader(vanishing, false);
  REQUIRE(reader.open());
  std::ofstream(vanishing, std::ios::binary | std::ios::in | std::ios::out)
      << std::string(200, 'z');
  (void)reader.find_exact(record(1, 0).key);
  (void)reader.find_exact(record(2, 0).key);
  CHECK(reader.errors() <= 1);
}

TEST_CASE("tunedb import: all or nothing, file:line:field in every message") {
  std::vector<std::string> lines;
  for (int i = 1; i <= 50; ++i) lines.push_back(record(i, 1.0 + i).to_json().dump());
  auto with = [&](const char* field, nlohmann::json value) {
    auto j = record(51, 5.0).to_json();
    j[field] = value;
    return j.dump();
  };
  struct Bad {
    std::string line, message;
  };
  const Bad bad_lines[] = {
      {"{not json", "rows.jsonl:51: not a JSON value"},
      {with("m", 51.9), "rows.jsonl:51: field 'm' = 51.9 is not an integer"},
      {with("m", 1e30), "field 'm' = 1e+30 is outside 1..2147483648"},
      {with("m", INT64_MAX), "field 'm' = 9223372036854775807 is outside"},
      {with("m", UINT64_MAX), "field 'm' = 18446744073709551615 is outside"},
      {with("n", -4), "field 'n' = -4 is outside"},
      {with("m", "64"), "field 'm' = \"64\" is not an integer"},
      {with("time_us", nullptr), "field 'time_us' = null is not a number"},
      {with("time_us", 0.0), "field 'time_us' = 0.0 must be finite and > 0"},
      {with("algo", 3), "field 'algo' = 3 is not an object"},
      {with("device", ""), "field 'device' is empty"},
      {R"({"device":"a","device":"b"})", "key 'device' appears twice"},
      {"[1, 2]", "a record must be a JSON object, not array"},
      {record(7, 2.0).to_json().dump(), "rows.jsonl:51: repeats the key of line 7"},
  };
  for (const Bad& bad : bad_lines) {
    CAPTURE(bad.line);
    const std::string db_path = temp_db("import");
    TuneDb db(db_path, TuneDb::Mode::ReadWrite);
    db.upsert(record(1000, 9.0));
    auto file_lines = lines;
    file_lines.push_back(bad.line);
    const std::string path = write_lines("import-file", file_lines);
    CHECK_THROWS_WITH_AS(import_jsonl(db, path), doctest::Contains(bad.message.c_str()), Error);
    CHECK(db.count() == 1);  // nothing of lines 1-50 was stored
  }
  const std::string db_path = temp_db("import-ok");
  TuneDb db(db_path, TuneDb::Mode::ReadWrite);
  const ImportResult result = import_jsonl(db, write_lines("import-ok-file", lines));
  CHECK(result.rows == 50);
  CHECK(result.changed == 50);
  CHECK(db.count() == 50);
  // An integral float is an integer.
  auto j = record(60, 1.0).to_json();
  j["m"] = 60.0;
  CHECK(parse_jsonl_record(j.dump(), "x:1").key.m == 60);
}

TEST_CASE("tunedb export: a failed write leaves the previous file, a device gets an error") {
  const std::string db_path = temp_db("export");
  TuneDb db(db_path, TuneDb::Mode::ReadWrite);
  for (int i = 1; i <= 100; ++i) db.upsert(record(i, 1.0 + i));
  const std::string out = std::filesystem::path(db_path).replace_filename("export.jsonl").string();
  CHECK(export_jsonl(db, out) == 100);
  CHECK(read_jsonl(out).size() == 100);
  const std::string previous = file_bytes(out);
  // A full disk, imitated by a file-size limit: the write fails part-way.
  const int code = in_child([&] {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 10;
    try {
      TuneDb child_db(db_path, TuneDb::Mode::ReadOnly);
      export_jsonl(child_db, out);
      return 11;  // must not report success
    } catch (const Error& e) {
      return std::string(e.what()).find("cannot write") != std::string::npos ? 0 : 12;
    }
  });
  CHECK(code == 0);
  CHECK(file_bytes(out) == previous);
  int temporaries = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(out).parent_path()))
    temporaries += entry.path().filename().string().find(".tmp-") != std::string::npos;
  CHECK(temporaries == 0);
  if (std::filesystem::exists("/dev/full")) {
    CHECK_THROWS_WITH_AS(export_jsonl(db, "/dev/full"), doctest::Contains("cannot write"), Error);
    CHECK(std::filesystem::is_character_file("/dev/full"));
  }
}
