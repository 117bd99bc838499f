#include "tunedb/tunedb_jsonl.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.hpp"
#include "tunedb/file_writer.hpp"
#include "tunedb/tunedb_path.hpp"

namespace ge2 {
namespace {

std::int64_t write_rows(const TuneDb& db, FileWriter& out) {
  std::int64_t count = 0;
  for (const auto& row : db.list()) {
    out.write(row.to_json().dump() + "\n");
    ++count;
  }
  return count;
}

}  // namespace

TuneRecord parse_jsonl_record(const std::string& line, const std::string& where) {
  // nlohmann keeps the last of repeated keys; the parser callback sees each key.
  std::vector<std::set<std::string>> keys_per_object;
  std::string repeated;
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) keys_per_object.emplace_back();
    if (event == Event::object_end && !keys_per_object.empty()) keys_per_object.pop_back();
    if (event == Event::key && !keys_per_object.empty() &&
        !keys_per_object.back().insert(parsed.get<std::string>()).second && repeated.empty())
      repeated = parsed.get<std::string>();
    return true;
  };
  const auto j = nlohmann::json::parse(line, callback, false);
  require(!j.is_discarded(), GE2_ERROR_TUNEDB, "{}: not a JSON value", where);
  require(repeated.empty(), GE2_ERROR_TUNEDB, "{}: key '{}' appears twice", where, repeated);
  return TuneRecord::from_json(j, where);
}

std::vector<TuneRecord> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  require(in.is_open(), GE2_ERROR_TUNEDB, "tunedb: cannot read '{}': {}", path,
          std::strerror(errno));
  std::vector<TuneRecord> rows;
  std::map<std::string, int> line_of_key;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, line_number);
    TuneRecord row = parse_jsonl_record(line, where);
    const auto [it, inserted] = line_of_key.emplace(row.key.to_string(), line_number);
    require(inserted, GE2_ERROR_TUNEDB, "{}: repeats the key of line {} ({})", where, it->second,
            it->first);
    rows.push_back(std::move(row));
  }
  require(!in.bad(), GE2_ERROR_TUNEDB, "tunedb: reading '{}' failed after line {}", path,
          line_number);
  return rows;
}

ImportResult import_jsonl(TuneDb& db, const std::string& path) {
  const std::vector<TuneRecord> rows = read_jsonl(path);
  return {static_cast<std::int64_t>(rows.size()), db.upsert_all(rows)};
}

std::int64_t export_jsonl(const TuneDb& db, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    require(fd >= 0, GE2_ERROR_TUNEDB, "tunedb: cannot write '{}': {}", path, std::strerror(errno));
    FileWriter out(fd, path);
    const std::int64_t count = write_rows(db, out);
    out.close();
    return count;
  }
  // Through a symbolic link, the file it names is replaced, not the link.
  const fs::path target = fs::exists(status) ? fs::canonical(path, error) : fs::path(path);
  std::string temporary = (target.parent_path() / (target.filename().string() + ".tmp-XXXXXX"));
  if (!target.has_parent_path()) temporary = target.filename().string() + ".tmp-XXXXXX";
  const int fd = ::mkostemp(temporary.data(), O_CLOEXEC);
  require(fd >= 0, GE2_ERROR_TUNEDB, "tunedb: cannot create a temporary file beside '{}': {}", path,
          std::strerror(errno));
  try {
    FileWriter out(fd, path);
    require(::fchmod(fd, new_file_mode()) == 0, GE2_ERROR_TUNEDB,
            "tunedb: cannot set the mode of '{}': {}", temporary, std::strerror(errno));
    const std::int64_t count = write_rows(db, out);
    out.sync();
    out.close();
    require(std::rename(temporary.c_str(), target.c_str()) == 0, GE2_ERROR_TUNEDB,
            "tunedb: cannot move the export into '{}': {}", path, std::strerror(errno));
    return count;
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
}

}  // namespace ge2
