// The tuning database on the CPU: schema and migration, upsert rules, key
// encoding and bucketing, JSON round trip, bad files, and many processes.
#include <doctest/doctest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "select/selector.hpp"
#include "select/tune_key.hpp"
#include "tunedb/tunedb.hpp"

using namespace ge2;

namespace {

std::string temp_db(const char* name) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("ge2-test-{}-{}", getpid(), name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return (dir / "tunedb.sqlite").string();
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
  CHECK_THROWS_WITH_AS(TuneRecord::from_json({{"device", "x"}}), doctest::Contains("malformed"),
                       Error);
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
