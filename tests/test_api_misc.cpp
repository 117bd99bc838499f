// Plan text, I/O enumeration, the one-shot call and concurrent execution on the CPU backend.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/api_helpers.hpp"
#include "support/scoped_env.hpp"
#include "support/scratch_dir.hpp"

using namespace ge2::test;

TEST_CASE("plan: a GEMM -> bias -> GELU chain compiles to one fused step and says so") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  GemmCase c;
  c.dtype = GE2_DTYPE_F32;
  c.m = 19;
  c.n = 23;
  c.k = 31;
  c.has_bias = true;
  c.act = GE2_ACT_GELU_ERF;
  c.fused_node = false;
  const auto result = run_gemm_case(context.get(), *memory, c);
  CHECK(result.error <= tolerance(c.dtype));
  const auto plan = nlohmann::json::parse(result.plan_json);
  REQUIRE(plan["steps"].size() == 1);
  const auto& step = plan["steps"][0];
  CHECK(step["op"] == "gemm_bias_act");
  CHECK(step["fused_from"].size() == 2);
  CHECK(step["problem"]["activation"] == "gelu_erf");
  CHECK(step["problem"]["has_bias"] == true);
  CHECK(step["selection"]["kernel"] == "cpu_ref");
  CHECK(plan["backend"]["kind"] == "cpu");
  bool fusion_noted = false;
  for (const auto& pass : plan["passes"])
    if (pass["pass"] == "fuse_gemm_bias_act") fusion_noted = pass["notes"].size() == 2;
  CHECK(fusion_noted);
}

TEST_CASE(
    "compile options: graph_replay is recorded; a 2.0 caller's shorter struct reads it as 0") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  GemmCase c;
  c.dtype = GE2_DTYPE_F32;
  c.m = 7;
  c.n = 9;
  c.k = 5;
  c.has_bias = true;
  c.act = GE2_ACT_RELU;
  c.graph_replay = true;
  auto result = run_gemm_case(context.get(), *memory, c);
  CHECK(result.error <= tolerance(c.dtype));  // ignored by the CPU backend, results unchanged
  CHECK(nlohmann::json::parse(result.plan_json)["graph_replay"] == true);
  // A caller compiled against 2.0 passes the struct without graph_replay: whatever
  // lies beyond its struct_size must not be read.
  c.options_struct_size = static_cast<std::uint32_t>(offsetof(ge2_compile_options_t, graph_replay));
  result = run_gemm_case(context.get(), *memory, c);
  CHECK(result.error <= tolerance(c.dtype));
  CHECK(nlohmann::json::parse(result.plan_json)["graph_replay"] == false);
}

TEST_CASE("plan: io enumeration reports names, shapes and byte spans") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  ge2_tensor_desc_t da{GE2_DTYPE_F16, 3, {2, 5, 7}, {0, 0, 0}};
  ge2_tensor_desc_t db{GE2_DTYPE_F16, 2, {7, 3}, {0, 0}};
  ge2_value_t a, b, d;
  REQUIRE(ge2_graph_add_input(graph.get(), "x", &da, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "w", &db, &b) == GE2_OK);
  REQUIRE(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &d) == GE2_OK);
  ge2_tensor_desc_t out_desc;
  REQUIRE(ge2_graph_get_desc(graph.get(), d, &out_desc) == GE2_OK);
  CHECK(out_desc.rank == 3);
  CHECK(out_desc.shape[0] == 2);
  CHECK(out_desc.shape[1] == 5);
  CHECK(out_desc.shape[2] == 3);
  REQUIRE(ge2_graph_mark_output(graph.get(), d, "y", nullptr) == GE2_OK);
  ge2_plan_t* plan = nullptr;
  REQUIRE(ge2_plan_compile(context.get(), graph.get(), nullptr, &plan) == GE2_OK);
  PlanPtr owned(plan);
  size_t count = 0;
  REQUIRE(ge2_plan_io_count(plan, &count) == GE2_OK);
  REQUIRE(count == 3);
  ge2_io_info_t info;
  REQUIRE(ge2_plan_io_info(plan, 2, &info) == GE2_OK);
  CHECK(std::string(info.name) == "y");
  CHECK(info.is_output == 1);
  CHECK(info.required_bytes == 2 * 5 * 3 * 2);
  CHECK(info.desc.strides[0] == 15);
}

TEST_CASE("plan: dead nodes are removed and graph inputs kept") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  ge2_tensor_desc_t da{GE2_DTYPE_F32, 2, {4, 4}, {0, 0}};
  ge2_value_t a, unused_input, used, dead;
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &da, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "spare", &da, &unused_input) == GE2_OK);
  REQUIRE(ge2_graph_add_gemm(graph.get(), a, a, GE2_NO_VALUE, nullptr, &dead) == GE2_OK);
  REQUIRE(ge2_graph_add_activation(graph.get(), a, GE2_ACT_RELU, &used) == GE2_OK);
  REQUIRE(ge2_graph_mark_output(graph.get(), used, "y", nullptr) == GE2_OK);
  ge2_plan_t* plan = nullptr;
  REQUIRE(ge2_plan_compile(context.get(), graph.get(), nullptr, &plan) == GE2_OK);
  PlanPtr owned(plan);
  const char* text = nullptr;
  REQUIRE(ge2_plan_describe(plan, &text) == GE2_OK);
  const auto json = nlohmann::json::parse(text);
  CHECK(json["steps"].size() == 1);
  CHECK(json["steps"][0]["op"] == "activation");
  CHECK(json["io"].size() == 3);
}

TEST_CASE("one-shot: ge2_gemm_bias_act matches fp64 and reuses its plan") {
  auto context = make_context(GE2_DEVICE_CPU);
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16, GE2_DTYPE_F32}) {
    const std::int64_t m = 13, n = 10, k = 29, batch = 2, lda = 32, ldd = 12;
    HostTensor a = make_tensor(dtype, {batch, m, k}, {m * lda + 3, lda, 1});
    HostTensor b = make_tensor(dtype, {batch, n, k});  // trans_b
    HostTensor bias = make_tensor(dtype, {n});
    HostTensor d = make_tensor(dtype, {batch, m, n}, {m * ldd, ldd, 1});
    fill_random(a);
    fill_random(b);
    fill_random(bias);
    ge2_gemm_params_t p = gemm_params(dtype, m, n, k);
    p.batch = batch;
    p.trans_b = 1;
    p.lda = lda;
    p.stride_a = m * lda + 3;
    p.ldd = ldd;
    p.activation = GE2_ACT_GELU_TANH;
    p.has_bias = 1;
    p.alpha = 0.75f;
    for (int repeat = 0; repeat < 2; ++repeat) {
      poison(d);
      REQUIRE_MESSAGE(ge2_gemm_bias_act(context.get(), &p, a.data(), b.data(), bias.data(),
                                        d.data(), nullptr) == GE2_OK,
                      std::string(ge2_last_error()));
      const auto ref =
          gemm_reference(a, b, nullptr, &bias, {false, true, 0.75, 0.0, GE2_ACT_GELU_TANH});
      CHECK(relative_error(d, ref) <= tolerance(dtype));
    }
  }
}

TEST_CASE("one-shot: $GE2_FORCE_KERNEL applies to its plans as to ge2_plan_compile's") {
  HostTensor a = make_tensor(GE2_DTYPE_F32, {6, 5}), b = make_tensor(GE2_DTYPE_F32, {5, 4}),
             d = make_tensor(GE2_DTYPE_F32, {6, 4});
  fill_random(a);
  fill_random(b);
  const ge2_gemm_params_t p = gemm_params(GE2_DTYPE_F32, 6, 4, 5);
  auto call = [&](ge2_context_t* context) {
    poison(d);
    return ge2_gemm_bias_act(context, &p, a.data(), b.data(), nullptr, d.data(), nullptr);
  };
  // Read when a one-shot plan is compiled: each context below starts with an empty cache.
  ScopedEnv forced("GE2_FORCE_KERNEL", "lt_f32");
  {
    auto context = make_context(GE2_DEVICE_CPU);
    CHECK(call(context.get()) == GE2_ERROR_UNSUPPORTED);
    CHECK(std::string(ge2_last_error()).find("kernel 'lt_f32' was forced") != std::string::npos);
  }
  forced.set("no_such_kernel");
  {
    auto context = make_context(GE2_DEVICE_CPU);
    CHECK(call(context.get()) == GE2_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(ge2_last_error()).find("'$GE2_FORCE_KERNEL' = 'no_such_kernel'") !=
          std::string::npos);
  }
  forced.set("cpu_ref");
  {
    auto context = make_context(GE2_DEVICE_CPU);
    REQUIRE_MESSAGE(call(context.get()) == GE2_OK, std::string(ge2_last_error()));
    CHECK(relative_error(d, gemm_reference(a, b, nullptr, nullptr, {})) <=
          tolerance(GE2_DTYPE_F32));
  }
}

TEST_CASE("$GE2_CPU_THREADS bounds the CPU GEMM's threads; a bad value is refused by name") {
  ScopedEnv threads_variable("GE2_CPU_THREADS", nullptr);
  for (const char* bad : {"0", "-1", "abc", "3x", " 2", "1025", "99999999999"}) {
    threads_variable.set(bad);
    ge2_context_options_t options;
    ge2_context_options_init(&options);
    options.device = GE2_DEVICE_CPU;
    ge2_context_t* context = nullptr;
    CHECK(ge2_context_create(GE2_API_VERSION, &options, &context) == GE2_ERROR_INVALID_ARGUMENT);
    CHECK(context == nullptr);
    CHECK(std::string(ge2_last_error()).find(fmt::format("$GE2_CPU_THREADS = '{}'", bad)) !=
          std::string::npos);
  }
  // Past the size from which the GEMM uses threads: one thread and the default give
  // the same bits (each element is one fp32 sum in order either way).
  HostTensor a = make_tensor(GE2_DTYPE_F32, {96, 200}), b = make_tensor(GE2_DTYPE_F32, {200, 300});
  fill_random(a);
  fill_random(b);
  const ge2_gemm_params_t p = gemm_params(GE2_DTYPE_F32, 96, 300, 200);
  std::vector<HostTensor> results;
  for (const char* threads : {"1", ""}) {
    threads_variable.set(threads);
    auto context = make_context(GE2_DEVICE_CPU);
    const char* text = nullptr;
    REQUIRE(ge2_context_describe(context.get(), &text) == GE2_OK);
    const auto described = nlohmann::json::parse(text);
    if (*threads != '\0') CHECK(described["gemm_threads"] == 1);
    CHECK(described["gemm_threads_from"] ==
          (*threads != '\0' ? "$GE2_CPU_THREADS" : "usable CPUs, at most 16"));
    HostTensor d = make_tensor(GE2_DTYPE_F32, {96, 300});
    poison(d);
    REQUIRE(ge2_gemm_bias_act(context.get(), &p, a.data(), b.data(), nullptr, d.data(), nullptr) ==
            GE2_OK);
    CHECK(relative_error(d, gemm_reference(a, b, nullptr, nullptr, {})) <=
          tolerance(GE2_DTYPE_F32));
    results.push_back(std::move(d));
  }
  CHECK(results[0].bytes == results[1].bytes);
}

TEST_CASE("concurrency: one plan executed from several threads gives right answers") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  ge2_tensor_desc_t da{GE2_DTYPE_F32, 2, {24, 16}, {0, 0}}, db{GE2_DTYPE_F32, 2, {16, 8}, {0, 0}};
  ge2_value_t a, b, d;
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &da, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "b", &db, &b) == GE2_OK);
  REQUIRE(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &d) == GE2_OK);
  REQUIRE(ge2_graph_add_activation(graph.get(), d, GE2_ACT_RELU, &d) == GE2_OK);
  REQUIRE(ge2_graph_mark_output(graph.get(), d, "d", nullptr) == GE2_OK);
  ge2_compile_options_t options;
  ge2_compile_options_init(&options);
  options.fuse = 0;  // keep an intermediate buffer that the executions share
  ge2_plan_t* plan = nullptr;
  REQUIRE(ge2_plan_compile(context.get(), graph.get(), &options, &plan) == GE2_OK);
  PlanPtr owned(plan);

  constexpr int kThreads = 4;
  std::vector<HostTensor> as, bs, ds;
  std::vector<std::vector<double>> refs;
  for (int t = 0; t < kThreads; ++t) {
    as.push_back(make_tensor(GE2_DTYPE_F32, {24, 16}));
    bs.push_back(make_tensor(GE2_DTYPE_F32, {16, 8}));
    ds.push_back(make_tensor(GE2_DTYPE_F32, {24, 8}));
    fill_random(as.back());
    fill_random(bs.back());
    refs.push_back(
        gemm_reference(as.back(), bs.back(), nullptr, nullptr, {false, false, 1, 0, GE2_ACT_RELU}));
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        poison(ds[static_cast<std::size_t>(t)]);
        ge2_binding_t bindings[] = {{"a", as[static_cast<std::size_t>(t)].data()},
                                    {"b", bs[static_cast<std::size_t>(t)].data()},
                                    {"d", ds[static_cast<std::size_t>(t)].data()}};
        if (ge2_plan_execute(plan, bindings, 3, nullptr) != GE2_OK ||
            relative_error(ds[static_cast<std::size_t>(t)], refs[static_cast<std::size_t>(t)]) >
                1e-5)
          ++failures[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) CHECK(failures[static_cast<std::size_t>(t)] == 0);
}

TEST_CASE(
    "GE2_TUNE_RECORD: compiled GEMM problems are appended; a foreign file is left untouched") {
  const std::string dir = scratch_subdir("record-api").string();
  const std::string path = dir + "/gemms.jsonl";
  std::vector<std::string> warnings;
  auto make_recording_context = [&](const std::string& file) {
    const ScopedEnv record("GE2_TUNE_RECORD", file.c_str());  // read once, at creation
    ge2_context_options_t options;
    REQUIRE(ge2_context_options_init(&options) == GE2_OK);
    options.device = GE2_DEVICE_CPU;
    options.log_user_data = &warnings;
    options.log_callback = [](void* user, ge2_log_level_t, const char* message) {
      static_cast<std::vector<std::string>*>(user)->emplace_back(message);
    };
    ge2_context_t* raw = nullptr;
    REQUIRE(ge2_context_create(GE2_API_VERSION, &options, &raw) == GE2_OK);
    return ContextPtr(raw);
  };
  auto lines_of = [](const std::string& file) {
    std::vector<nlohmann::json> lines;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  };
  {
    ContextPtr context = make_recording_context(path);
    const LinearLayer layer =
        make_linear_layer(context.get(), GE2_DTYPE_F16, 37, 48, 24, GE2_ACT_SILU, nullptr);
    // A one-shot call compiles (and records) once; its second call is a cache hit.
    HostTensor a = make_tensor(GE2_DTYPE_F32, {5, 8}), b = make_tensor(GE2_DTYPE_F32, {8, 6}),
               d = make_tensor(GE2_DTYPE_F32, {5, 6});
    fill_random(a);
    fill_random(b);
    ge2_gemm_params_t params;
    REQUIRE(ge2_gemm_params_init(&params) == GE2_OK);
    params.dtype = GE2_DTYPE_F32;
    params.m = 5, params.n = 6, params.k = 8;
    for (int call = 0; call < 2; ++call)
      REQUIRE(ge2_gemm_bias_act(context.get(), &params, a.data(), b.data(), nullptr, d.data(),
                                nullptr) == GE2_OK);
  }
  const auto lines = lines_of(path);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["ge2_gemm_record"] == 1);
  CHECK((lines[0]["m"] == 37 && lines[0]["n"] == 48 && lines[0]["k"] == 24));
  CHECK((lines[0]["dtype"] == "f16" && lines[0]["act"] == "silu" && lines[0]["bias"] == true));
  CHECK(lines[0]["trans_b"] == true);
  CHECK((lines[1]["m"] == 5 && lines[1]["n"] == 6 && lines[1]["k"] == 8 &&
         lines[1]["dtype"] == "f32"));
  CHECK(warnings.empty());

  // Somebody else's file: compiles still succeed, the file keeps its bytes, one warning.
  const std::string foreign = dir + "/notes.txt";
  std::ofstream(foreign) << "not ge2's\n";
  {
    ContextPtr context = make_recording_context(foreign);
    for (int i = 0; i < 2; ++i)
      make_linear_layer(context.get(), GE2_DTYPE_F32, 4, 8, 16, GE2_ACT_NONE, nullptr);
  }
  std::ifstream in(foreign);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "not ge2's\n");
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("left untouched") != std::string::npos);
  CHECK(warnings[0].find("records no more") != std::string::npos);
}
