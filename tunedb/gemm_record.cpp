#include "tunedb/gemm_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <string_view>

#include "core/error.hpp"
#include "tunedb/file_writer.hpp"

namespace ge2 {
namespace {

// The first key of every line: what marks a file as a record file.
constexpr std::string_view kMarker = R"({"ge2_gemm_record":)";
constexpr int kRecordVersion = 1;

RecordedTensor tensor_of(const MatrixView& v, std::int64_t batch) {
  if (batch > 1 && v.batch_stride != 0)
    return {{batch, v.rows, v.cols}, {v.batch_stride, v.row_stride, v.col_stride}};
  return {{v.rows, v.cols}, {v.row_stride, v.col_stride}};
}

nlohmann::ordered_json tensor_json(const RecordedTensor& t) {
  return {{"shape", t.shape}, {"strides", t.strides}};
}

// Field readers: each names the file, line and field of what it refuses.
class LineReader {
 public:
  LineReader(const nlohmann::json& object, std::string where)
      : object_(object), where_(std::move(where)) {}

  const nlohmann::json* find(const char* field) const {
    const auto it = object_.find(field);
    return it == object_.end() ? nullptr : &*it;
  }
  const nlohmann::json& get(const char* field) const {
    const nlohmann::json* value = find(field);
    if (value == nullptr) fail(field, "is missing");
    return *value;
  }
  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw Error(GE2_ERROR_INVALID_ARGUMENT, fmt::format("{}: field '{}' {}", where_, field, why));
  }
  std::int64_t size(const char* field) const {
    const nlohmann::json& v = get(field);
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 ||
        v.get<std::int64_t>() > kMaxDimension)
      fail(field, fmt::format("= {} is not an integer in 1..{}", v.dump(), kMaxDimension));
    return v.get<std::int64_t>();
  }
  bool flag(const char* field) const {
    const nlohmann::json& v = get(field);
    if (!v.is_boolean()) fail(field, fmt::format("= {} is not true or false", v.dump()));
    return v.get<bool>();
  }
  float number(const char* field) const {
    const nlohmann::json& v = get(field);
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      fail(field, fmt::format("= {} is not a finite number", v.dump()));
    return v.get<float>();
  }
  Activation activation(const char* field) const {
    const nlohmann::json& v = get(field);
    for (const ActivationInfo& info : kActivations)
      if (v.is_string() && v.get<std::string>() == info.name) return info.act;
    fail(field, fmt::format("= {} is not an activation name", v.dump()));
  }
  DType dtype(const char* field) const {
    const nlohmann::json& v = get(field);
    for (const DTypeInfo& info : kDTypes)
      if (v.is_string() && v.get<std::string>() == info.name) return info.id;
    fail(field, fmt::format("= {} is not a dtype name", v.dump()));
  }
  RecordedTensor tensor(const char* field) const {
    const nlohmann::json& v = get(field);
    RecordedTensor t;
    const auto shape = v.is_object() ? v.find("shape") : v.end();
    const auto strides = v.is_object() ? v.find("strides") : v.end();
    if (shape == v.end() || strides == v.end() || !shape->is_array() || !strides->is_array() ||
        shape->size() != strides->size() || shape->size() < 2 || shape->size() > 3)
      fail(field, "is not {\"shape\": [...], \"strides\": [...]} of rank 2 or 3");
    for (std::size_t i = 0; i < shape->size(); ++i) {
      const nlohmann::json &dim = (*shape)[i], &stride = (*strides)[i];
      if (!dim.is_number_integer() || dim.get<std::int64_t>() < 1 ||
          dim.get<std::int64_t>() > kMaxDimension || !stride.is_number_integer() ||
          stride.get<std::int64_t>() < 0 ||
          stride.get<std::int64_t>() > kMaxDimension * kMaxDimension)
        fail(field, fmt::format("has a dimension or stride out of range: {}", v.dump()));
      t.shape.push_back(dim.get<std::int64_t>());
      t.strides.push_back(stride.get<std::int64_t>());
    }
    return t;
  }

 private:
  const nlohmann::json& object_;
  std::string where_;
};

RecordedGemm parse_record(const std::string& line, const std::string& where) {
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& error) {
    throw Error(GE2_ERROR_INVALID_ARGUMENT, fmt::format("{}: not JSON: {}", where, error.what()));
  }
  if (!object.is_object())
    throw Error(GE2_ERROR_INVALID_ARGUMENT, fmt::format("{}: not a JSON object", where));
  const LineReader in(object, where);
  const nlohmann::json& version = in.get("ge2_gemm_record");
  if (version != kRecordVersion)
    in.fail("ge2_gemm_record", fmt::format("= {} is not {}, the record version this ge2 reads",
                                           version.dump(), kRecordVersion));
  RecordedGemm r;
  r.dtype = in.dtype("dtype");
  r.m = in.size("m");
  r.n = in.size("n");
  r.k = in.size("k");
  r.batch = in.size("batch");
  r.trans_a = in.flag("trans_a");
  r.trans_b = in.flag("trans_b");
  r.alpha = in.number("alpha");
  r.beta = in.number("beta");
  r.a = in.tensor("a");
  r.b = in.tensor("b");
  r.d = in.tensor("d");
  if (in.find("c") != nullptr) r.c = in.tensor("c");
  r.bias = in.flag("bias");
  r.act = in.activation("act");
  if (in.find("gated") != nullptr) r.gated = in.activation("gated");
  return r;
}

}  // namespace

RecordedGemm record_of(const GemmProblem& p) {
  RecordedGemm r;
  r.dtype = p.dtype;
  r.m = p.m;
  r.n = p.n;
  r.k = p.k;
  r.batch = p.batch;
  r.trans_a = p.trans_a;
  r.trans_b = p.trans_b;
  r.alpha = p.alpha;
  r.beta = p.has_c ? p.beta : 0.0f;
  r.a = tensor_of(p.a, p.batch);
  r.b = tensor_of(p.b, p.batch);
  if (p.has_c) r.c = tensor_of(p.c, p.batch);
  r.d = tensor_of(p.gated ? p.gated->out : p.d, p.batch);
  r.bias = p.has_bias;
  r.act = p.act;
  if (p.gated) r.gated = p.gated->act;
  return r;
}

nlohmann::ordered_json to_json(const RecordedGemm& r) {
  nlohmann::ordered_json j{{"ge2_gemm_record", kRecordVersion},
                           {"dtype", dtype_name(r.dtype)},
                           {"m", r.m},
                           {"n", r.n},
                           {"k", r.k},
                           {"batch", r.batch},
                           {"trans_a", r.trans_a},
                           {"trans_b", r.trans_b},
                           {"alpha", r.alpha},
                           {"beta", r.beta},
                           {"a", tensor_json(r.a)},
                           {"b", tensor_json(r.b)}};
  if (r.c) j["c"] = tensor_json(*r.c);
  j["d"] = tensor_json(r.d);
  j["bias"] = r.bias;
  j["act"] = activation_name(r.act);
  if (r.gated) j["gated"] = activation_name(*r.gated);
  return j;
}

void append_gemm_records(const std::string& path, const std::vector<RecordedGemm>& records) {
  std::string text;
  for (const RecordedGemm& r : records) text += to_json(r).dump() + "\n";  // the marker first
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
  require(fd >= 0, GE2_ERROR_INVALID_ARGUMENT, "GEMM record file '{}': cannot open it: {}", path,
          std::strerror(errno));
  FileWriter out(fd, path, GE2_ERROR_INVALID_ARGUMENT, "GEMM record file");
  struct stat status {};
  require(::fstat(fd, &status) == 0 && S_ISREG(status.st_mode), GE2_ERROR_INVALID_ARGUMENT,
          "GEMM record file '{}' is not a regular file; left untouched", path);
  if (status.st_size > 0) {
    char head[kMarker.size()] = {};
    const ssize_t n = ::pread(fd, head, sizeof(head), 0);
    require(
        n == static_cast<ssize_t>(sizeof(head)) && std::string_view(head, sizeof(head)) == kMarker,
        GE2_ERROR_INVALID_ARGUMENT,
        "GEMM record file '{}' is not one (its first line is not a ge2 GEMM record); left "
        "untouched",
        path);
  }
  out.write(text);
  out.close();
}

std::vector<RecordedGemm> read_gemm_records(const std::string& path) {
  std::ifstream in(path);
  require(in.good(), GE2_ERROR_INVALID_ARGUMENT, "GEMM record file '{}': cannot open it", path);
  std::vector<RecordedGemm> records;
  std::set<std::string> seen;
  std::int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty() || !seen.insert(line).second) continue;
    records.push_back(parse_record(line, fmt::format("{}:{}", path, number)));
  }
  return records;
}

}  // namespace ge2
