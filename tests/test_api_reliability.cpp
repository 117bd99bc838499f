// The hostile-caller classes of the reliability review, one test case each:
// size overflow, enums by value, string lifetimes, graph races, binding
// counts, aliased bindings, host memory totals, the one-shot LRU cache and
// plan/context destruction order. Run under ASan/UBSan in CI, so a read or
// write out of bounds fails them even where the status looks right.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/api_helpers.hpp"
#include "support/raw_enum_calls.h"

using namespace ge2::test;

namespace {

void expect_status(ge2_status_t got, ge2_status_t want, const char* function,
                   std::initializer_list<const char*> fragments) {
  const std::string message = ge2_last_error();
  INFO("message: " << message);
  CHECK_MESSAGE(got == want, ge2_status_string(got) << " instead of " << ge2_status_string(want));
  CHECK(message.rfind(std::string(function) + ": ", 0) == 0);
  CHECK(message.find("operator()") == std::string::npos);
  for (const char* fragment : fragments)
    CHECK_MESSAGE(message.find(fragment) != std::string::npos, "missing '" << fragment << "'");
}

nlohmann::json describe(ge2_context_t* context) {
  const char* text = nullptr;
  REQUIRE(ge2_context_describe(context, &text) == GE2_OK);
  return nlohmann::json::parse(text);
}

ge2_tensor_desc_t desc(std::int64_t d0, std::int64_t d1, std::int64_t d2 = 0,
                       ge2_dtype_t dtype = GE2_DTYPE_F32) {
  ge2_tensor_desc_t d{};
  d.dtype = dtype;
  d.rank = d2 > 0 ? 3 : 2;
  d.shape[0] = d0;
  d.shape[1] = d1;
  d.shape[2] = d2;
  return d;
}

ge2_context_t* context_for_params() {
  static const ContextPtr context = make_context(GE2_DEVICE_CPU);
  return context.get();
}

// a [m, k] x b [k, n] -> d, compiled on the CPU backend.
PlanPtr small_gemm_plan(ge2_context_t* context, std::int64_t m, std::int64_t n, std::int64_t k) {
  auto graph = make_graph();
  const auto da = desc(m, k), db = desc(k, n);
  ge2_value_t a, b, d;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "a", &da, &a));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "b", &db, &b));
  GE2_CHECK(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &d));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), d, "d", nullptr));
  ge2_plan_t* plan = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph.get(), nullptr, &plan));
  return PlanPtr(plan);
}

}  // namespace

TEST_CASE("reliability: messages name the API function, never a lambda") {
  ge2_context_t* context = nullptr;
  expect_status(ge2_context_create(GE2_API_VERSION, nullptr, nullptr), GE2_ERROR_INVALID_ARGUMENT,
                "ge2_context_create", {"argument 'out' is NULL"});
  expect_status((ge2_context_options_init)(nullptr), GE2_ERROR_INVALID_ARGUMENT,
                "ge2_context_options_init", {"argument 'options'"});
  expect_status(ge2_graph_create(nullptr), GE2_ERROR_INVALID_ARGUMENT, "ge2_graph_create",
                {"argument 'out'"});
  const auto d = desc(2, 2);
  ge2_value_t v;
  expect_status(ge2_graph_add_input(nullptr, "x", &d, &v), GE2_ERROR_INVALID_ARGUMENT,
                "ge2_graph_add_input", {"argument 'graph' is NULL"});
  expect_status(ge2_graph_add_gemm(nullptr, 0, 0, GE2_NO_VALUE, nullptr, &v),
                GE2_ERROR_INVALID_ARGUMENT, "ge2_graph_add_gemm", {"argument 'graph'"});
  expect_status(ge2_plan_compile(nullptr, nullptr, nullptr, nullptr), GE2_ERROR_INVALID_ARGUMENT,
                "ge2_plan_compile", {"argument 'context'"});
  expect_status(ge2_plan_execute(nullptr, nullptr, 0, nullptr), GE2_ERROR_INVALID_ARGUMENT,
                "ge2_plan_execute", {"argument 'plan'"});
  expect_status((ge2_gemm_params_init)(nullptr), GE2_ERROR_INVALID_ARGUMENT, "ge2_gemm_params_init",
                {"argument 'params'"});
  expect_status(ge2_gemm_bias_act(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
                GE2_ERROR_INVALID_ARGUMENT, "ge2_gemm_bias_act", {"argument 'context'"});
  CHECK(context == nullptr);
}

TEST_CASE("reliability: a GEMM result beyond 2^40 elements is refused, not wrapped") {
  auto graph = make_graph();
  // a [2^31, 512, 1] x b [1, 2^24]: each operand is valid, batch * M * N = 2^79.
  const auto da = desc(std::int64_t{1} << 31, 512, 1, GE2_DTYPE_F16);
  const auto db = desc(1, std::int64_t{1} << 24, 0, GE2_DTYPE_F16);
  ge2_value_t a, b, d = 1234;
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &da, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "b", &db, &b) == GE2_OK);
  expect_status(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &d),
                GE2_ERROR_INVALID_ARGUMENT, "ge2_graph_add_gemm",
                {"[2147483648, 512, 16777216]", "more than 1099511627776 elements"});
  expect_status(
      ge2_graph_add_gemm_bias_act(graph.get(), a, b, GE2_NO_VALUE, nullptr, GE2_ACT_RELU, &d),
      GE2_ERROR_INVALID_ARGUMENT, "ge2_graph_add_gemm_bias_act", {"more than"});
  CHECK(d == 1234);  // outputs are written only on success

  // The same product through the one-shot parameter block.
  auto context = make_context(GE2_DEVICE_CPU);
  ge2_gemm_params_t p;
  ge2_gemm_params_init(&p);
  p.m = 512;
  p.n = std::int64_t{1} << 24;
  p.k = 1;
  p.batch = std::int64_t{1} << 31;
  float tiny[4] = {};
  expect_status(ge2_gemm_bias_act(context.get(), &p, tiny, tiny, nullptr, tiny, nullptr),
                GE2_ERROR_INVALID_ARGUMENT, "ge2_gemm_bias_act", {"elements"});
  // Leading dimensions whose products overflow int64.
  ge2_gemm_params_init(&p);
  p.m = std::int64_t{1} << 31;
  p.n = p.k = 2;
  p.lda = INT64_MAX;
  expect_status(ge2_gemm_bias_act(context.get(), &p, tiny, tiny, nullptr, tiny, nullptr),
                GE2_ERROR_INVALID_ARGUMENT, "ge2_gemm_bias_act", {"'params->lda'"});
  // Strides at the limit in a description.
  auto g2 = make_graph();
  auto strided = desc(std::int64_t{1} << 31, 2);
  strided.strides[0] = INT64_MAX;
  strided.strides[1] = 1;
  expect_status(ge2_graph_add_input(g2.get(), "x", &strided, &a), GE2_ERROR_INVALID_ARGUMENT,
                "ge2_graph_add_input", {"strides[0]"});
}

TEST_CASE("reliability: out-of-range enums passed by value are refused") {
  auto graph = make_graph();
  const auto dx = desc(4, 4);
  ge2_value_t x, out;
  REQUIRE(ge2_graph_add_input(graph.get(), "x", &dx, &x) == GE2_OK);
  for (int bad :
       {-1, GE2_ACT_QUICK_GELU + 1, 77, INT_MAX, INT_MIN, static_cast<int>(0xfffffffeu)}) {
    CAPTURE(bad);
    expect_status(raw_graph_add_activation(graph.get(), x, bad, &out), GE2_ERROR_INVALID_ARGUMENT,
                  "ge2_graph_add_activation", {"argument 'act'", std::to_string(bad).c_str()});
    expect_status(raw_graph_add_gemm_bias_act(graph.get(), x, x, GE2_NO_VALUE, bad, &out),
                  GE2_ERROR_INVALID_ARGUMENT, "ge2_graph_add_gemm_bias_act", {"argument 'act'"});
    if (bad < GE2_OK || bad > GE2_ERROR_INTERNAL)
      CHECK(std::string(raw_status_string(bad)) == "GE2_UNKNOWN_STATUS");
    ge2_context_options_t options;
    ge2_context_options_init(&options);
    ge2_context_t* context = nullptr;
    if (bad < GE2_DEVICE_AUTO || bad > GE2_DEVICE_CPU) {
      raw_set_device(&options, bad);
      expect_status(ge2_context_create(GE2_API_VERSION, &options, &context),
                    GE2_ERROR_INVALID_ARGUMENT, "ge2_context_create", {"'options->device'"});
    }
    ge2_context_options_init(&options);
    raw_set_tune_mode(&options, bad);
    expect_status(ge2_context_create(GE2_API_VERSION, &options, &context),
                  GE2_ERROR_INVALID_ARGUMENT, "ge2_context_create", {"'options->tune_mode'"});
    auto d = dx;
    raw_set_dtype(&d, bad);
    expect_status(ge2_graph_add_input(graph.get(), "y", &d, &out), GE2_ERROR_INVALID_ARGUMENT,
                  "ge2_graph_add_input", {"dtype"});
    ge2_gemm_params_t p;
    ge2_gemm_params_init(&p);
    p.m = p.n = p.k = 1;
    raw_set_params_enums(&p, GE2_DTYPE_F32, bad);
    float one[1] = {1.0f}, result[1];
    expect_status(ge2_gemm_bias_act(context_for_params(), &p, one, one, nullptr, result, nullptr),
                  GE2_ERROR_INVALID_ARGUMENT, "ge2_gemm_bias_act", {"'params->activation'"});
    raw_set_params_enums(&p, bad, GE2_ACT_NONE);
    expect_status(ge2_gemm_bias_act(context_for_params(), &p, one, one, nullptr, result, nullptr),
                  GE2_ERROR_INVALID_ARGUMENT, "ge2_gemm_bias_act", {"'params->dtype'"});
  }
}

TEST_CASE("reliability: every string ge2_context_describe returned lives as long as the context") {
  auto context = make_context(GE2_DEVICE_CPU);
  const char* first = nullptr;
  REQUIRE(ge2_context_describe(context.get(), &first) == GE2_OK);
  const std::string copy = first;
  // A one-shot call changes the description (cache counters): a new string.
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, d[4];
  ge2_gemm_params_t p;
  ge2_gemm_params_init(&p);
  p.m = p.n = p.k = 2;
  p.dtype = GE2_DTYPE_F32;
  GE2_CHECK(ge2_gemm_bias_act(context.get(), &p, a, b, nullptr, d, nullptr));
  const char* second = nullptr;
  REQUIRE(ge2_context_describe(context.get(), &second) == GE2_OK);
  CHECK(std::string(second) != copy);
  CHECK(std::string(first) == copy);  // ASan: no use after free
  const char* third = nullptr;
  REQUIRE(ge2_context_describe(context.get(), &third) == GE2_OK);
  CHECK(third == second);  // an unchanged description is not stored twice
}

TEST_CASE("reliability: compiling a graph while another thread builds it is refused, not a race") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  const auto da = desc(4, 4);
  ge2_value_t a, d;
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &da, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_gemm(graph.get(), a, a, GE2_NO_VALUE, nullptr, &d) == GE2_OK);
  REQUIRE(ge2_graph_mark_output(graph.get(), d, "d", nullptr) == GE2_OK);
  std::atomic<bool> stop{false};
  std::atomic<int> refused_builds{0}, refused_compiles{0}, compiled{0};
  std::thread builder([&] {
    ge2_value_t x = a;
    for (int i = 0; i < 3000 && !stop; ++i) {
      const ge2_status_t s = ge2_graph_add_activation(graph.get(), x, GE2_ACT_RELU, &x);
      if (s != GE2_OK) {
        CHECK(std::string(ge2_last_error()).find("another thread") != std::string::npos);
        ++refused_builds;
        x = a;
      }
    }
  });
  for (int i = 0; i < 200; ++i) {
    ge2_plan_t* plan = nullptr;
    const ge2_status_t s = ge2_plan_compile(context.get(), graph.get(), nullptr, &plan);
    if (s == GE2_OK) {
      ++compiled;
      ge2_plan_destroy(plan);
    } else {
      CHECK(s == GE2_ERROR_INVALID_ARGUMENT);
      CHECK(std::string(ge2_last_error()).find("being modified by another thread") !=
            std::string::npos);
      ++refused_compiles;
    }
  }
  stop = true;
  builder.join();
  MESSAGE("compiled " << compiled.load() << ", refused " << refused_compiles.load()
                      << " compiles and " << refused_builds.load() << " builds");
  CHECK(compiled + refused_compiles == 200);
  // Several threads may compile one graph at once.
  std::vector<std::thread> compilers;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t)
    compilers.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        ge2_plan_t* plan = nullptr;
        if (ge2_plan_compile(context.get(), graph.get(), nullptr, &plan) == GE2_OK) {
          ++ok;
          ge2_plan_destroy(plan);
        }
      }
    });
  for (auto& t : compilers) t.join();
  CHECK(ok == 80);
}

TEST_CASE("reliability: num_bindings beyond the plan's io count is refused before reading") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto plan = small_gemm_plan(context.get(), 2, 2, 2);
  float a[4] = {}, b[4] = {}, d[4] = {};
  // Heap array of exactly three entries: ASan reports any read past it.
  std::vector<ge2_binding_t> bindings{{"a", a}, {"b", b}, {"d", d}};
  for (std::size_t count : {std::size_t{4}, std::size_t{1000}, SIZE_MAX}) {
    CAPTURE(count);
    expect_status(ge2_plan_execute(plan.get(), bindings.data(), count, nullptr),
                  GE2_ERROR_INVALID_ARGUMENT, "ge2_plan_execute",
                  {"'num_bindings' =", "3 inputs and outputs"});
  }
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings.data(), bindings.size(), nullptr));
}

TEST_CASE("reliability: an output overlapping another binding is refused") {
  auto context = make_context(GE2_DEVICE_CPU);
  // A two-step plan: d = relu(a @ b), each 8 x 8 f32 (256 bytes).
  auto graph = make_graph();
  const auto d8 = desc(8, 8);
  ge2_value_t a, b, g, d;
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &d8, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "b", &d8, &b) == GE2_OK);
  REQUIRE(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &g) == GE2_OK);
  REQUIRE(ge2_graph_add_activation(graph.get(), g, GE2_ACT_RELU, &d) == GE2_OK);
  REQUIRE(ge2_graph_mark_output(graph.get(), d, "d", nullptr) == GE2_OK);
  ge2_compile_options_t options;
  ge2_compile_options_init(&options);
  options.fuse = 0;
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context.get(), graph.get(), &options, &raw));
  PlanPtr plan(raw);
  std::vector<float> memory(3 * 64);
  float* pa = memory.data();
  float* pb = memory.data() + 64;
  float* pd = memory.data() + 128;
  for (int i = 0; i < 128; ++i) memory[static_cast<std::size_t>(i)] = 0.01f * (i % 17) - 0.05f;
  ge2_binding_t onto_input[] = {{"a", pa}, {"b", pb}, {"d", pa}};
  expect_status(ge2_plan_execute(plan.get(), onto_input, 3, nullptr), GE2_ERROR_INVALID_ARGUMENT,
                "ge2_plan_execute", {"output 'd'", "overlaps input 'a'"});
  ge2_binding_t partly[] = {{"a", pa}, {"b", pb}, {"d", pb + 63}};  // one float shared
  expect_status(ge2_plan_execute(plan.get(), partly, 3, nullptr), GE2_ERROR_INVALID_ARGUMENT,
                "ge2_plan_execute", {"overlaps input 'b'"});
  // Inputs may share memory; adjacent (touching) ranges do not overlap.
  ge2_binding_t shared_inputs[] = {{"a", pa}, {"b", pa}, {"d", pb}};
  GE2_CHECK(ge2_plan_execute(plan.get(), shared_inputs, 3, nullptr));
  ge2_binding_t adjacent[] = {{"a", pa}, {"b", pb}, {"d", pd}};
  GE2_CHECK(ge2_plan_execute(plan.get(), adjacent, 3, nullptr));
  double expected = 0;  // d[2][5]
  for (int kk = 0; kk < 8; ++kk) expected += double(pa[2 * 8 + kk]) * pb[kk * 8 + 5];
  CHECK(pd[2 * 8 + 5] == doctest::Approx(expected > 0 ? expected : 0.0).epsilon(1e-5));

  // The one-shot call: D onto A.
  ge2_gemm_params_t p;
  ge2_gemm_params_init(&p);
  p.m = p.n = p.k = 8;
  p.dtype = GE2_DTYPE_F32;
  expect_status(ge2_gemm_bias_act(context.get(), &p, pa, pb, nullptr, pa, nullptr),
                GE2_ERROR_INVALID_ARGUMENT, "ge2_gemm_bias_act", {"output 'd'", "input 'a'"});
}

TEST_CASE("reliability: intermediates are checked against host memory together, not each") {
  const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  REQUIRE(physical > 0);
  // Each f32 intermediate takes 40% of physical memory; three of them 120%.
  const std::int64_t rows = std::int64_t{1} << 20;
  const auto cols = static_cast<std::int64_t>(0.4 * physical / 4.0 / static_cast<double>(rows));
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  const auto dx = desc(rows, cols);
  ge2_value_t x, v;
  REQUIRE(ge2_graph_add_input(graph.get(), "x", &dx, &x) == GE2_OK);
  v = x;
  for (int i = 0; i < 4; ++i)
    REQUIRE(ge2_graph_add_activation(graph.get(), v, GE2_ACT_RELU, &v) == GE2_OK);
  REQUIRE(ge2_graph_mark_output(graph.get(), v, "y", nullptr) == GE2_OK);
  ge2_plan_t* plan = nullptr;
  expect_status(ge2_plan_compile(context.get(), graph.get(), nullptr, &plan),
                GE2_ERROR_OUT_OF_MEMORY, "ge2_plan_compile",
                {"intermediate buffers and constants together", "physical memory"});
  CHECK(plan == nullptr);
}

TEST_CASE("reliability: the one-shot cache evicts the least recently used plan") {
  ge2_context_options_t options;
  ge2_context_options_init(&options);
  CHECK(options.one_shot_cache_size == 1024);
  options.device = GE2_DEVICE_CPU;
  options.tunedb_path = "";
  options.one_shot_cache_size = 3;
  ge2_context_t* raw = nullptr;
  GE2_CHECK(ge2_context_create(GE2_API_VERSION, &options, &raw));
  ContextPtr context(raw);
  std::vector<float> a(64, 0.5f), b(64, 0.25f), d(64);
  auto call = [&](std::int64_t m) {
    ge2_gemm_params_t p;
    ge2_gemm_params_init(&p);
    p.m = m;
    p.n = p.k = 4;
    p.dtype = GE2_DTYPE_F32;
    GE2_CHECK(ge2_gemm_bias_act(context.get(), &p, a.data(), b.data(), nullptr, d.data(), nullptr));
    CHECK(d[static_cast<std::size_t>(4 * m - 1)] == doctest::Approx(0.5));  // 4 * 0.5 * 0.25
  };
  for (std::int64_t m : {1, 2, 3, 1, 4, 1, 2}) call(m);
  // 1 2 3 miss; 1 hit; 4 miss evicts 2 (least recent); 1 hit; 2 miss evicts 3.
  const auto cache = describe(context.get())["one_shot_cache"];
  CHECK(cache["capacity"] == 3);
  CHECK(cache["size"] == 3);
  CHECK(cache["hits"] == 2);
  CHECK(cache["misses"] == 5);
  CHECK(cache["evictions"] == 2);

  // 0 disables the cache; a 2.1 caller's shorter struct gets the default.
  options.one_shot_cache_size = 0;
  GE2_CHECK(ge2_context_create(GE2_API_VERSION, &options, &raw));
  ContextPtr uncached(raw);
  options.struct_size =
      static_cast<std::uint32_t>(offsetof(ge2_context_options_t, one_shot_cache_size));
  GE2_CHECK(ge2_context_create(GE2_API_VERSION, &options, &raw));
  ContextPtr old_caller(raw);
  CHECK(describe(uncached.get())["one_shot_cache"]["capacity"] == 0);
  CHECK(describe(old_caller.get())["one_shot_cache"]["capacity"] == 1024);
}

TEST_CASE("reliability: a plan stays usable after its context is destroyed") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto plan = small_gemm_plan(context.get(), 3, 2, 4);
  context.reset();
  float a[12], b[8], d[6];
  for (int i = 0; i < 12; ++i) a[i] = 0.5f * static_cast<float>(i) - 2.0f;
  for (int i = 0; i < 8; ++i) b[i] = 1.0f - 0.25f * static_cast<float>(i);
  ge2_binding_t bindings[] = {{"a", a}, {"b", b}, {"d", d}};
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings, 3, nullptr));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      double expected = 0;
      for (int kk = 0; kk < 4; ++kk) expected += double(a[i * 4 + kk]) * b[kk * 2 + j];
      CHECK(d[i * 2 + j] == doctest::Approx(expected).epsilon(1e-6));
    }
}
