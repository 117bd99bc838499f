// ge_tune: prebuilds and manages ge2's tuning database.
//
//   ge_tune [--db FILE] tune   [--shape MxNxK[xB]]... [--shapes-file F] [--preset FFN]
//                              [--dtype f16|bf16|f32] [--act
//                              none|relu|gelu|gelu_tanh|silu|quick_gelu]
//                              [--no-bias] [--weights nk|kn] [--from-recorded FILE]
//                              [--device cuda|cpu] [--device-ordinal N] [--json]
//   ge_tune [--db FILE] check  (the same options; which algorithm each shape gets)
//   ge_tune [--db FILE] list   [--kernel K] [--device TEXT]
//   ge_tune [--db FILE] export --out FILE.jsonl
//   ge_tune [--db FILE] import --in FILE.jsonl
//   ge_tune [--db FILE] prune  --keep-device KEY --keep-cublaslt N [--dry-run] [--force]
//   ge_tune [--db FILE] info
//
// --from-recorded FILE: the GEMM problems a workload compiled while
// $GE2_TUNE_RECORD named FILE (tunedb/gemm_record.hpp), each rebuilt as a graph
// that poses the same problem (layouts, C, epilogue, gated units included).
// --db may also follow the subcommand. Without it, the library's own rule
// finds the file: $GE2_TUNEDB, else $XDG_CACHE_HOME/ge2/tunedb.sqlite, else
// ~/.cache/ge2/tunedb.sqlite.
//
// Exit codes: 0 success, 1 runtime failure (device, database), 2 bad arguments.
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>

#include "core/activation.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/tensor_type.hpp"
#include "ge_v2_api.h"
#include "tunedb/gemm_record.hpp"
#include "tunedb/tunedb.hpp"
#include "tunedb/tunedb_jsonl.hpp"
#include "tunedb/tunedb_path.hpp"

namespace {

struct Shape {
  std::int64_t m, n, k, batch;
};

// A size in 1..limit, or a ValidationError naming the option and the text.
std::int64_t parse_size(const std::string& digits, std::int64_t limit, const char* option,
                        const std::string& text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value < 1 || value > limit)
    throw CLI::ValidationError(option,
                               fmt::format("'{}': {} must be in 1..{}", text, digits, limit));
  return value;
}

Shape parse_shape(const std::string& text) {
  static const std::regex pattern(R"((\d+)x(\d+)x(\d+)(?:x(\d+))?)");
  std::smatch match;
  if (!std::regex_match(text, match, pattern))
    throw CLI::ValidationError("--shape", fmt::format("'{}' is not MxNxK or MxNxKxB", text));
  auto size = [&](int i) { return parse_size(match[i], ge2::kMaxDimension, "--shape", text); };
  return {size(1), size(2), size(3), match[4].matched ? size(4) : 1};
}

// Transformer feed-forward shapes for a hidden size: up- and down-projection
// (4x expansion) at a token count.
// --act's choices: the activation table's names, and "gelu" for its erf form (as the Python
// binding spells it).
std::map<std::string, ge2_activation_t> activation_choices() {
  std::map<std::string, ge2_activation_t> choices{{"gelu", GE2_ACT_GELU_ERF}};
  for (const ge2::ActivationInfo& row : ge2::kActivations)
    choices[row.name] = static_cast<ge2_activation_t>(row.act);
  return choices;
}

std::vector<Shape> preset_shapes(const std::string& preset) {
  static const std::regex pattern(R"(ffn:(\d+)(?::(\d+))?)");
  std::smatch match;
  if (!std::regex_match(preset, match, pattern))
    throw CLI::ValidationError("--preset", fmt::format("'{}' is not ffn:HIDDEN[:TOKENS]", preset));
  const std::int64_t hidden = parse_size(match[1], ge2::kMaxDimension / 4, "--preset", preset);
  const std::int64_t tokens =
      match[2].matched ? parse_size(match[2], ge2::kMaxDimension, "--preset", preset) : 16384;
  return {{tokens, 4 * hidden, hidden, 1}, {tokens, hidden, 4 * hidden, 1}};
}

// ge2_last_error() names the function and the argument already.
void check(ge2_status_t status) {
  if (status != GE2_OK)
    throw std::runtime_error(fmt::format("{} ({})", ge2_last_error(), ge2_status_string(status)));
}

ge2_context_t* open_context(ge2_tune_mode_t mode, const std::string& db, ge2_device_kind_t device,
                            int ordinal) {
  ge2_context_options_t options;
  check(ge2_context_options_init(&options));
  options.device = device;
  options.device_ordinal = ordinal;
  options.tune_mode = mode;
  options.tunedb_path = db.c_str();
  ge2_context_t* context = nullptr;
  check(ge2_context_create(GE2_API_VERSION, &options, &context));
  return context;
}

// Compiles a one-node GEMM(+bias+act) plan; in tune mode that tunes the problem.
// `nn_linear`: B is an [N, K] weight used transposed, as torch.nn.Linear stores it.
// The plan's first step, described; destroys the graph.
nlohmann::json compile_first_step(ge2_context_t* context, ge2_graph_t* graph) {
  ge2_plan_t* plan = nullptr;
  const ge2_status_t status = ge2_plan_compile(context, graph, nullptr, &plan);
  ge2_graph_destroy(graph);
  check(status);
  const char* text = nullptr;
  check(ge2_plan_describe(plan, &text));
  nlohmann::json step = nlohmann::json::parse(text)["steps"][0];
  ge2_plan_destroy(plan);
  return step;
}

ge2_tensor_desc_t desc_of(ge2::DType dtype, const ge2::RecordedTensor& t) {
  ge2_tensor_desc_t desc{
      static_cast<ge2_dtype_t>(dtype), static_cast<int32_t>(t.shape.size()), {}, {}};
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    desc.shape[i] = t.shape[i];
    desc.strides[i] = t.strides[i];
  }
  return desc;
}

// A dense constant of random values of magnitude in [0.5, 1) and either sign,
// written as bit patterns (what the weights hold does not change a GEMM's time).
ge2_value_t add_random_constant(ge2_graph_t* graph, const char* name, ge2::DType dtype,
                                std::vector<std::int64_t> shape) {
  ge2_tensor_desc_t desc = desc_of(dtype, {shape, std::vector<std::int64_t>(shape.size(), 0)});
  std::int64_t count = 1;
  for (std::int64_t dim : shape) {
    // Each dim is at most 2^31 (the record's check): the product is checked as it grows.
    if (dim > ge2::kMaxDimension / count)
      throw std::runtime_error(
          fmt::format("constant '{}' of the recorded gated unit would have "
                      "more than 2^31 elements; ge_tune builds none that large",
                      name));
    count *= dim;
  }
  const std::size_t bytes = ge2::dtype_size(dtype);
  std::vector<unsigned char> data(static_cast<std::size_t>(count) * bytes);
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  for (std::int64_t i = 0; i < count; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const auto bits = static_cast<std::uint32_t>(state >> 32);
    const std::uint32_t sign = bits >> 31;
    // Exponent of 0.5 and random mantissa bits, in each format.
    const std::uint32_t pattern =
        dtype == ge2::DType::F16    ? (sign << 15) | 0x3800u | (bits & 0x3ffu)
        : dtype == ge2::DType::BF16 ? (sign << 15) | 0x3f00u | (bits & 0x7fu)
                                    : (sign << 31) | 0x3f000000u | (bits & 0x7fffffu);
    std::memcpy(data.data() + static_cast<std::size_t>(i) * bytes, &pattern,
                bytes);  // little endian
  }
  ge2_value_t value = GE2_NO_VALUE;
  check(ge2_graph_add_constant(graph, name, &desc, data.data(), &value));
  return value;
}

// A graph whose plan poses the recorded problem: A, B, C and D with their
// layouts, bias and activation after the GEMM (fused back into its epilogue);
// a gated unit as act(x·Wg) ⊙ (x·Wu) with constant halves of the joined weight.
ge2_graph_t* graph_of(const ge2::RecordedGemm& r) {
  ge2_graph_t* graph = nullptr;
  check(ge2_graph_create(&graph));
  try {
    ge2_gemm_attrs_t attrs;
    check(ge2_gemm_attrs_init(&attrs));
    attrs.trans_a = r.trans_a ? 1 : 0;
    attrs.trans_b = r.trans_b ? 1 : 0;
    attrs.alpha = r.alpha;
    attrs.beta = r.beta;
    const ge2_tensor_desc_t da = desc_of(r.dtype, r.a), dd = desc_of(r.dtype, r.d);
    ge2_value_t a = GE2_NO_VALUE, out = GE2_NO_VALUE;
    check(ge2_graph_add_input(graph, "a", &da, &a));
    auto gemm_bias = [&](ge2_value_t b, ge2_value_t c, ge2_value_t bias) {
      ge2_value_t d = GE2_NO_VALUE;
      check(ge2_graph_add_gemm(graph, a, b, c, &attrs, &d));
      if (bias != GE2_NO_VALUE) check(ge2_graph_add_bias(graph, d, bias, &d));
      return d;
    };
    if (r.gated) {
      const std::int64_t half = r.n / 2;
      const std::vector<std::int64_t> weight =
          r.trans_b ? std::vector{half, r.k} : std::vector{r.k, half};
      const ge2_value_t wg = add_random_constant(graph, "w_gate", r.dtype, weight);
      const ge2_value_t wu = add_random_constant(graph, "w_up", r.dtype, weight);
      ge2_value_t bg = GE2_NO_VALUE, bu = GE2_NO_VALUE;
      if (r.bias) {
        bg = add_random_constant(graph, "b_gate", r.dtype, {half});
        bu = add_random_constant(graph, "b_up", r.dtype, {half});
      }
      ge2_value_t gate = gemm_bias(wg, GE2_NO_VALUE, bg);
      check(ge2_graph_add_activation(graph, gate, static_cast<ge2_activation_t>(*r.gated), &gate));
      check(ge2_graph_add_elementwise(graph, GE2_ELEMENTWISE_MUL, gate,
                                      gemm_bias(wu, GE2_NO_VALUE, bu), &out));
    } else {
      const ge2_tensor_desc_t db = desc_of(r.dtype, r.b);
      ge2_value_t b = GE2_NO_VALUE, c = GE2_NO_VALUE, bias = GE2_NO_VALUE;
      check(ge2_graph_add_input(graph, "b", &db, &b));
      if (r.c) {
        const ge2_tensor_desc_t dc = desc_of(r.dtype, *r.c);
        check(ge2_graph_add_input(graph, "c", &dc, &c));
      }
      if (r.bias) {
        const ge2_tensor_desc_t dbias = desc_of(r.dtype, {{r.n}, {1}});
        check(ge2_graph_add_input(graph, "bias", &dbias, &bias));
      }
      out = gemm_bias(b, c, bias);
      if (r.act != ge2::Activation::None)
        check(ge2_graph_add_activation(graph, out, static_cast<ge2_activation_t>(r.act), &out));
    }
    check(ge2_graph_mark_output(graph, out, "d", &dd));
  } catch (...) {
    ge2_graph_destroy(graph);
    throw;
  }
  return graph;
}

nlohmann::json compile_shape(ge2_context_t* context, const Shape& s, ge2_dtype_t dtype,
                             ge2_activation_t act, bool bias, bool nn_linear) {
  ge2_graph_t* graph = nullptr;
  check(ge2_graph_create(&graph));
  ge2_tensor_desc_t da{dtype, s.batch > 1 ? 3 : 2, {}, {}}, db{dtype, s.batch > 1 ? 3 : 2, {}, {}},
      dbias{dtype, 1, {s.n}, {}};
  const int r = s.batch > 1 ? 1 : 0;
  if (r) da.shape[0] = db.shape[0] = s.batch;
  da.shape[r] = s.m, da.shape[r + 1] = s.k;
  db.shape[r] = nn_linear ? s.n : s.k, db.shape[r + 1] = nn_linear ? s.k : s.n;
  ge2_gemm_attrs_t attrs;
  check(ge2_gemm_attrs_init(&attrs));
  attrs.trans_b = nn_linear ? 1 : 0;
  ge2_value_t a, b, vb = GE2_NO_VALUE, d;
  check(ge2_graph_add_input(graph, "a", &da, &a));
  check(ge2_graph_add_input(graph, "b", &db, &b));
  if (bias) check(ge2_graph_add_input(graph, "bias", &dbias, &vb));
  check(ge2_graph_add_gemm_bias_act(graph, a, b, vb, &attrs, act, &d));
  check(ge2_graph_mark_output(graph, d, "d", nullptr));
  return compile_first_step(context, graph);
}

// Deletes every row but those of (keep_device, keep_version), matched exactly,
// after printing what goes. A key that matches no row is most likely a typo:
// without --force nothing is deleted then.
int run_prune(ge2::TuneDb& database, const std::string& keep_device, std::int64_t keep_version,
              bool dry_run, bool force) {
  std::map<std::pair<std::string, std::int64_t>, int> doomed;
  int kept = 0;
  for (const auto& row : database.list()) {
    if (row.key.device == keep_device && row.key.cublaslt_version == keep_version)
      ++kept;
    else
      ++doomed[{row.key.device, row.key.cublaslt_version}];
  }
  if (kept == 0 && !doomed.empty() && !force) {
    fmt::print(stderr,
               "ge_tune: no entry has device '{}' and cuBLASLt {}; pruning would delete all {} "
               "group(s):\n",
               keep_device, keep_version, doomed.size());
    for (const auto& [key, count] : doomed)
      fmt::print(stderr, "  {} cuBLASLt {}: {} entries\n", key.first, key.second, count);
    fmt::print(stderr, "check the key with 'ge_tune list'; --force deletes anyway\n");
    return 2;
  }
  for (const auto& [key, count] : doomed)
    fmt::print("{} {} entries of {} cuBLASLt {}\n", dry_run ? "would delete" : "deleting", count,
               key.first, key.second);
  if (dry_run) {
    fmt::print("dry run: nothing deleted; {} entries kept\n", kept);
    return 0;
  }
  fmt::print("removed {} entries, kept {}\n", database.prune(keep_device, keep_version), kept);
  return 0;
}

std::string format_eta(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ge_tune: prebuild and manage the ge2 tuning database"};
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("ge_tune (ge2 {}, C API {})",
                                                ge2_get_version_string(), GE2_API_VERSION));
  std::string db;
  std::vector<std::string> shape_texts, presets;
  std::string shapes_file, dtype_text = "f16", act_text = "relu", weights_text = "nk",
                           kernel_filter, device_filter, file, keep_device, recorded_file,
                           device_text = "cuda";
  bool no_bias = false, dry_run = false, force = false, json = false;
  std::int64_t keep_cublaslt = -1;
  int device_ordinal = 0;

  auto add_problem_options = [&](CLI::App* sub) {
    sub->add_option("--shape", shape_texts, "MxNxK or MxNxKxB (repeatable)");
    sub->add_option("--shapes-file", shapes_file, "file with one shape per line")
        ->check(CLI::ExistingFile);
    sub->add_option("--preset", presets, "ffn:HIDDEN[:TOKENS] (transformer feed-forward shapes)");
    sub->add_option("--dtype", dtype_text, "f16, bf16 or f32")
        ->check(CLI::IsMember({"f16", "bf16", "f32"}));
    sub->add_option("--act", act_text, "none, relu, gelu (erf), gelu_tanh, silu or quick_gelu")
        ->check(CLI::IsMember(activation_choices()));
    sub->add_flag("--no-bias", no_bias, "tune the GEMM without a bias");
    sub->add_option("--weights", weights_text,
                    "B's layout: nk (an [N, K] weight used transposed, as torch.nn.Linear "
                    "stores it; the default) or kn ([K, N])")
        ->check(CLI::IsMember({"nk", "kn"}));
    sub->add_option("--from-recorded", recorded_file,
                    "the GEMM problems a workload compiled with $GE2_TUNE_RECORD=FILE")
        ->check(CLI::ExistingFile);
    sub->add_option("--device", device_text, "cuda (the default) or cpu (the reference backend)")
        ->check(CLI::IsMember({"cuda", "cpu"}));
    sub->add_option("--device-ordinal", device_ordinal, "CUDA device ordinal (default 0)")
        ->check(CLI::NonNegativeNumber);
    sub->add_flag("--json", json, "one JSON object per problem");
  };
  auto* tune = app.add_subcommand("tune", "tune shapes and store the winners");
  auto* check = app.add_subcommand(
      "check", "show which algorithm each shape gets from the database (cached mode)");
  for (auto* sub : {tune, check}) add_problem_options(sub);
  auto* list = app.add_subcommand("list", "list stored entries");
  list->add_option("--kernel", kernel_filter, "only this kernel (lt_f16, ...)");
  list->add_option("--device", device_filter, "only devices whose key contains this text");
  list->add_flag("--json", json, "one JSON object per entry (JSON Lines, as export writes)");
  auto* export_cmd = app.add_subcommand("export", "write entries as JSON Lines");
  export_cmd->add_option("--out", file, "output file (replaced only once complete)")->required();
  auto* import_cmd = app.add_subcommand(
      "import", "read entries from JSON Lines, all or nothing (the faster measurement wins)");
  import_cmd->add_option("--in", file, "input file")->required()->check(CLI::ExistingFile);
  auto* prune = app.add_subcommand(
      "prune", "delete entries of every device and cuBLASLt version but the one kept");
  prune->add_option("--keep-device", keep_device, "device key to keep, exactly as list shows it")
      ->required();
  prune->add_option("--keep-cublaslt", keep_cublaslt, "cuBLASLt version to keep")
      ->required()
      ->check(CLI::NonNegativeNumber);
  prune->add_flag("--dry-run", dry_run, "print what would be deleted and delete nothing");
  prune->add_flag("--force", force,
                  "delete even when no entry has the kept device and version (that deletes all)");
  auto* info = app.add_subcommand("info", "database path, schema version and counts");
  info->add_flag("--json", json, "one JSON object");
  const char* db_help =
      "database file (default: $GE2_TUNEDB, else $XDG_CACHE_HOME/ge2/tunedb.sqlite, else "
      "~/.cache/ge2/tunedb.sqlite)";
  app.add_option("--db", db, db_help);
  for (auto* sub : {tune, check, list, export_cmd, import_cmd, prune, info})
    sub->add_option("--db", db, db_help);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : 2;  // --help is success; every other parse error is a usage error
  }

  // The library's resolver, so that ge_tune and ge2 contexts open the same file.
  if (db.empty()) db = ge2::resolve_tunedb_path(nullptr);
  if (db.empty()) {
    fmt::print(stderr,
               "ge_tune: no database: pass --db FILE, or set GE2_TUNEDB, XDG_CACHE_HOME or HOME\n");
    return 2;
  }
  try {
    if (tune->parsed() || check->parsed()) {
      std::vector<Shape> shapes;
      for (const auto& t : shape_texts) shapes.push_back(parse_shape(t));
      for (const auto& p : presets)
        for (const auto& s : preset_shapes(p)) shapes.push_back(s);
      if (!shapes_file.empty()) {
        std::ifstream in(shapes_file);
        for (std::string line; std::getline(in, line);)
          if (!line.empty() && line[0] != '#') shapes.push_back(parse_shape(line));
      }
      const std::vector<ge2::RecordedGemm> recorded = recorded_file.empty()
                                                          ? std::vector<ge2::RecordedGemm>{}
                                                          : ge2::read_gemm_records(recorded_file);
      if (shapes.empty() && recorded.empty())
        throw CLI::ValidationError(
            "--shape", "no shapes given (--shape, --shapes-file, --preset or --from-recorded)");
      const ge2_dtype_t dtype = dtype_text == "f16"    ? GE2_DTYPE_F16
                                : dtype_text == "bf16" ? GE2_DTYPE_BF16
                                                       : GE2_DTYPE_F32;
      const ge2_activation_t act = activation_choices().at(act_text);
      // One compile per problem: the shapes in the options' terms, then the recorded ones.
      struct Job {
        std::string label;
        nlohmann::json problem;
        std::function<nlohmann::json(ge2_context_t*)> compile;
      };
      std::vector<Job> jobs;
      for (const Shape& s : shapes)
        jobs.push_back({fmt::format("{}x{}x{}x{} {} {} weights {}", s.batch, s.m, s.n, s.k,
                                    dtype_text, act_text, weights_text),
                        {{"batch", s.batch},
                         {"m", s.m},
                         {"n", s.n},
                         {"k", s.k},
                         {"dtype", dtype_text},
                         {"act", act_text},
                         {"bias", !no_bias},
                         {"weights", weights_text}},
                        [&, s](ge2_context_t* c) {
                          return compile_shape(c, s, dtype, act, !no_bias, weights_text == "nk");
                        }});
      for (const ge2::RecordedGemm& r : recorded)
        jobs.push_back(
            {fmt::format("recorded {}x{}x{}x{} {} act {}{}{}{}", r.batch, r.m, r.n, r.k,
                         ge2::dtype_name(r.dtype), ge2::activation_name(r.act),
                         r.bias ? " bias" : "", r.c ? " C" : "",
                         r.gated ? fmt::format(" gated {}", ge2::activation_name(*r.gated)) : ""),
             ge2::to_json(r),
             [r](ge2_context_t* c) { return compile_first_step(c, graph_of(r)); }});
      ge2_context_t* context =
          open_context(tune->parsed() ? GE2_TUNE_TUNE : GE2_TUNE_CACHED, db,
                       device_text == "cpu" ? GE2_DEVICE_CPU : GE2_DEVICE_CUDA, device_ordinal);
      const bool terminal = isatty(STDERR_FILENO) && !json;
      const auto begin = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const nlohmann::json step = jobs[i].compile(context);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        const double eta =
            elapsed / static_cast<double>(i + 1) * static_cast<double>(jobs.size() - i - 1);
        const auto& kernel = step["kernel"];
        // cuBLASLt steps name their algorithm's source, CUTLASS steps their configuration.
        const std::string source = kernel.value("algo_source", kernel.value("configuration", "-"));
        if (json)
          fmt::print("{}\n", nlohmann::json{{"problem", jobs[i].problem},
                                            {"kernel", kernel.value("name", "?")},
                                            {"source", source},
                                            {"compile_s", seconds}}
                                 .dump());
        else
          fmt::print("{}: {} [{}] compile {:.3f} s\n", jobs[i].label, kernel.value("name", "?"),
                     source, seconds);
        if (terminal)
          fmt::print(stderr, "\r[{}/{}] elapsed {} eta {}   ", i + 1, jobs.size(),
                     format_eta(elapsed), format_eta(eta));
      }
      if (terminal) fmt::print(stderr, "\n");
      ge2_context_destroy(context);
      return 0;
    }
    const bool writes = import_cmd->parsed() || (prune->parsed() && !dry_run);
    ge2::TuneDb database(db, writes ? ge2::TuneDb::Mode::ReadWrite : ge2::TuneDb::Mode::ReadOnly);
    if (list->parsed()) {
      ge2::TuneDb::Filter filter{device_filter, kernel_filter, std::nullopt};
      if (json) {
        for (const auto& r : database.list(filter)) fmt::print("{}\n", r.to_json().dump());
        return 0;
      }
      fmt::print("{:<34} {:<8} {:<44} {:>22} {:>10} {:>10} {:>8}\n", "device", "kernel",
                 "signature", "BxMxNxK", "time us", "heur. us", "TFLOP/s");
      for (const auto& r : database.list(filter))
        fmt::print("{:<34} {:<8} {:<44} {:>22} {:>10.1f} {:>10.1f} {:>8.1f}\n", r.key.device,
                   r.key.kernel, r.key.signature,
                   fmt::format("{}x{}x{}x{}", r.key.batch, r.key.m, r.key.n, r.key.k), r.time_us,
                   r.heuristic_time_us, r.gflops / 1e3);
    } else if (export_cmd->parsed()) {
      const std::int64_t count = ge2::export_jsonl(database, file);
      fmt::print("exported {} entries to {}\n", count, file);
    } else if (import_cmd->parsed()) {
      const ge2::ImportResult result = ge2::import_jsonl(database, file);
      fmt::print("imported {} entries from {} ({} stored or improved)\n", result.rows, file,
                 result.changed);
    } else if (prune->parsed()) {
      return run_prune(database, keep_device, keep_cublaslt, dry_run, force);
    } else if (info->parsed()) {
      if (json)
        fmt::print("{}\n", nlohmann::json{{"database", database.path()},
                                          {"schema_version", database.schema_version()},
                                          {"entries", database.count()}}
                               .dump());
      else
        fmt::print("database: {}\nschema version: {}\nentries: {}\n", database.path(),
                   database.schema_version(), database.count());
    }
    return 0;
  } catch (const CLI::Error& error) {
    app.exit(error);
    return 2;
  } catch (const std::exception& error) {
    fmt::print(stderr, "ge_tune: {}\n", error.what());
    return 1;
  }
}
