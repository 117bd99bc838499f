// The GEMM record file ($GE2_TUNE_RECORD, ge_tune --from-recorded): a problem
// survives the round trip, bad lines are named, files that are not record files
// are left untouched, and lines appended at once do not interleave.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "support/scratch_dir.hpp"
#include "tunedb/gemm_record.hpp"

using namespace ge2;

namespace {

std::string temp_path(const char* name) {
  return (test::scratch_subdir(std::string("record-") + name) / "gemms.jsonl").string();
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A batched problem over a shared weight used transposed, padded rows, a C and a bias.
GemmProblem batched_problem() {
  GemmProblem p;
  p.dtype = DType::BF16;
  p.m = 5;
  p.n = 24;
  p.k = 40;
  p.batch = 3;
  p.a = {3, 5, 40, 5 * 48, 48, 1};  // rows padded to 48 elements
  p.b = {1, 24, 40, 0, 40, 1};      // [N, K], shared by every batch
  p.trans_b = true;
  p.c = {3, 5, 24, 5 * 24, 24, 1};
  p.d = p.c;
  p.has_c = true;
  p.beta = 0.5f;
  p.alpha = 2.0f;
  p.has_bias = true;
  p.act = Activation::GeluTanh;
  return p;
}

GemmProblem gated_problem() {
  GemmProblem p;
  p.dtype = DType::F16;
  p.m = 7;
  p.n = 32;
  p.k = 16;
  p.a = {1, 7, 16, 0, 16, 1};
  p.b = {1, 32, 16, 0, 16, 1};
  p.trans_b = true;
  p.d = {1, 7, 32, 0, 32, 1};
  p.gated = GatedOutput{Activation::Silu, {1, 7, 16, 0, 16, 1}};
  return p;
}

}  // namespace

TEST_CASE("gemm record: problems survive the file, layouts, C, epilogue and gated unit included") {
  const std::string path = temp_path("roundtrip");
  append_gemm_records(path, {record_of(batched_problem()), record_of(gated_problem())});
  append_gemm_records(path, {record_of(batched_problem())});  // a repeat: read once
  const std::vector<RecordedGemm> read = read_gemm_records(path);
  REQUIRE(read.size() == 2);
  CHECK(to_json(read[0]) == to_json(record_of(batched_problem())));
  CHECK(to_json(read[1]) == to_json(record_of(gated_problem())));
  const RecordedGemm& b = read[0];
  CHECK(b.dtype == DType::BF16);
  CHECK((b.m == 5 && b.n == 24 && b.k == 40 && b.batch == 3));
  CHECK(b.a.shape == std::vector<std::int64_t>{3, 5, 40});
  CHECK(b.a.strides == std::vector<std::int64_t>{240, 48, 1});
  CHECK(b.b.shape == std::vector<std::int64_t>{24, 40});  // shared: rank 2
  REQUIRE(b.c.has_value());
  CHECK(b.c->shape == std::vector<std::int64_t>{3, 5, 24});
  CHECK((b.trans_b && !b.trans_a && b.alpha == 2.0f && b.beta == 0.5f && b.bias));
  CHECK(b.act == Activation::GeluTanh);
  CHECK(!b.gated.has_value());
  const RecordedGemm& g = read[1];
  REQUIRE(g.gated.has_value());
  CHECK(*g.gated == Activation::Silu);
  CHECK(g.d.shape == std::vector<std::int64_t>{7, 16});  // the unit's output, not the 2I GEMM's
  CHECK(contents(path).starts_with(R"({"ge2_gemm_record":1,"dtype":"bf16",)"));
}

TEST_CASE("gemm record: a bad line is refused with its file, line and field") {
  const std::string path = temp_path("bad");
  append_gemm_records(path, {record_of(gated_problem())});
  const std::string good = contents(path);
  const std::pair<std::string, std::string> cases[] = {
      {R"({"ge2_gemm_record":2})", "field 'ge2_gemm_record' = 2 is not 1"},
      {"not json", "not JSON"},
      {"[1, 2]", "not a JSON object"},
  };
  for (const auto& [line, message] : cases) {
    std::ofstream(path, std::ios::binary) << good << "\n" << line << "\n";
    try {
      read_gemm_records(path);
      FAIL("accepted: " << line);
    } catch (const Error& error) {
      CHECK(error.status() == GE2_ERROR_INVALID_ARGUMENT);
      CHECK_MESSAGE(std::string(error.what()).find(path + ":3: " + message) == 0, error.what());
    }
  }
  // Each field: missing, or of the wrong kind, is named.
  nlohmann::json record = nlohmann::json::parse(good);
  for (const char* field : {"dtype", "m", "trans_b", "alpha", "a", "bias", "act"}) {
    nlohmann::json broken = record;
    broken[field] = field == std::string("dtype") || field == std::string("act") ? "nope" : "";
    std::ofstream(path, std::ios::binary) << broken.dump() << "\n";
    try {
      read_gemm_records(path);
      FAIL("accepted a bad " << field);
    } catch (const Error& error) {
      CHECK_MESSAGE(
          std::string(error.what()).find(fmt::format("{}:1: field '{}'", path, field)) == 0,
          error.what());
    }
  }
  nlohmann::json zero = record;
  zero["m"] = 0;
  std::ofstream(path, std::ios::binary) << zero.dump() << "\n";
  CHECK_THROWS_WITH_AS(read_gemm_records(path), doctest::Contains("field 'm' = 0"), Error);
}

TEST_CASE("gemm record: a file that is not a record file is left untouched") {
  const std::string path = temp_path("foreign");
  std::ofstream(path, std::ios::binary) << "somebody else's notes\n";
  CHECK_THROWS_WITH_AS(append_gemm_records(path, {record_of(gated_problem())}),
                       doctest::Contains("left untouched"), Error);
  CHECK(contents(path) == "somebody else's notes\n");
  const std::string directory = std::filesystem::path(path).parent_path().string();
  CHECK_THROWS_AS(append_gemm_records(directory, {record_of(gated_problem())}), Error);
  CHECK_THROWS_WITH_AS(append_gemm_records("/dev/null", {record_of(gated_problem())}),
                       doctest::Contains("not a regular file"), Error);
  // An empty file becomes a record file.
  const std::string empty = temp_path("empty");
  std::ofstream(empty, std::ios::binary).close();
  append_gemm_records(empty, {record_of(gated_problem())});
  CHECK(read_gemm_records(empty).size() == 1);
}

TEST_CASE("gemm record: records appended at once do not interleave") {
  const std::string path = temp_path("threads");
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      GemmProblem p = gated_problem();
      for (int i = 0; i < 50; ++i) {
        p.m = 1 + t * 50 + i;  // every line distinct
        p.a.rows = p.d.rows = p.gated->out.rows = p.m;
        append_gemm_records(path, {record_of(p), record_of(p)});
      }
    });
  for (auto& thread : threads) thread.join();
  CHECK(read_gemm_records(path).size() == 400);  // every line whole, each pair read once
}
