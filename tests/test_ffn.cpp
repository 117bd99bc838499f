// The FFN vocabulary on the CPU backend: elementwise add and multiply with
// their broadcasts, SiLU, the residual fusion, and whole transformer blocks
// (GELU MLP and SwiGLU, PyTorch's nn.Linear layout) against fp64.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "support/api_helpers.hpp"
#include "support/raw_enum_calls.h"

using namespace ge2::test;

namespace {

struct Broadcast {
  std::vector<std::int64_t> a, b;
};

// Compiles with default options and returns the plan with its parsed description.
std::pair<PlanPtr, nlohmann::json> compile_and_describe(ge2_context_t* context,
                                                        const ge2_graph_t* graph) {
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph, nullptr, &raw));
  PlanPtr plan(raw);
  const char* text = nullptr;
  GE2_CHECK(ge2_plan_describe(plan.get(), &text));
  return {std::move(plan), nlohmann::json::parse(text)};
}

}  // namespace

TEST_CASE("elementwise: add and mul, same shape and trailing broadcasts, every dtype") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  const Broadcast shapes[] = {{{7, 13}, {7, 13}},
                              {{7, 13}, {13}},
                              {{3, 5, 9}, {9}},
                              {{3, 5, 9}, {5, 9}},
                              {{3, 5, 9}, {3, 5, 9}}};
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16, GE2_DTYPE_F32})
    for (ge2_elementwise_op_t op : {GE2_ELEMENTWISE_ADD, GE2_ELEMENTWISE_MUL})
      for (const Broadcast& s : shapes)
        for (bool padded_out : {false, true}) {
          CAPTURE(dtype);
          CAPTURE(op);
          CAPTURE(s.a.size());
          CAPTURE(s.b.size());
          const ElementwiseResult r =
              run_elementwise_case(context.get(), *memory, dtype, op, s.a, s.b, padded_out);
          CHECK(r.error <= tolerance(dtype));
          CHECK(r.padding_intact);
        }
}

TEST_CASE("elementwise: bad operands and ops are refused with the argument named") {
  auto graph = make_graph();
  ge2_tensor_desc_t d23{GE2_DTYPE_F32, 2, {2, 3}, {0, 0}}, d32{GE2_DTYPE_F32, 2, {3, 2}, {0, 0}},
      d3{GE2_DTYPE_F32, 1, {3}, {0}}, d2{GE2_DTYPE_F32, 1, {2}, {0}},
      h23{GE2_DTYPE_F16, 2, {2, 3}, {0, 0}};
  ge2_value_t a, b, v, x, half, out = 77;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "a", &d23, &a));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "b", &d32, &b));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "v", &d3, &v));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &d2, &x));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "h", &h23, &half));
  auto expect = [&](ge2_status_t got, ge2_status_t want, const char* fragment) {
    const std::string message = ge2_last_error();
    INFO(message);
    CHECK(got == want);
    CHECK(message.rfind("ge2_graph_add_elementwise: ", 0) == 0);
    CHECK(message.find(fragment) != std::string::npos);
  };
  expect(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, a, b, &out),
         GE2_ERROR_SHAPE_MISMATCH, "argument 'b': shape [3, 2] f32 is neither a's shape");
  expect(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_MUL, a, x, &out),
         GE2_ERROR_SHAPE_MISMATCH, "argument 'b'");
  expect(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, v, v, &out),
         GE2_ERROR_SHAPE_MISMATCH, "argument 'a': rank 1");
  expect(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, a, half, &out),
         GE2_ERROR_SHAPE_MISMATCH, "dtype f16 differs");
  expect(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, a, 99, &out),
         GE2_ERROR_INVALID_ARGUMENT, "argument 'b' = 99");
  for (int bad : {0, 3, -1, 0x7fffffff}) {
    CAPTURE(bad);
    expect(raw_graph_add_elementwise(graph.get(), bad, a, v, &out), GE2_ERROR_INVALID_ARGUMENT,
           "argument 'op'");
  }
  expect(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, a, v, nullptr),
         GE2_ERROR_INVALID_ARGUMENT, "argument 'out' is NULL");
  CHECK(out == 77);
  GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, a, v, &out));
}

TEST_CASE("residual add after a GEMM becomes the GEMM's C operand, in either operand order") {
  auto context = make_context(GE2_DEVICE_CPU);
  for (bool residual_first : {false, true}) {
    auto graph = make_graph();
    ge2_tensor_desc_t dx{GE2_DTYPE_F32, 2, {4, 6}, {0, 0}}, dw{GE2_DTYPE_F32, 2, {6, 6}, {0, 0}},
        db{GE2_DTYPE_F32, 1, {6}, {0}};
    ge2_value_t x, w, b, g, y;
    GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &dx, &x));
    GE2_CHECK(ge2_graph_add_input(graph.get(), "w", &dw, &w));
    GE2_CHECK(ge2_graph_add_input(graph.get(), "b", &db, &b));
    GE2_CHECK(ge2_graph_add_gemm_bias_act(graph.get(), x, w, b, nullptr, GE2_ACT_NONE, &g));
    GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, residual_first ? x : g,
                                        residual_first ? g : x, &y));
    GE2_CHECK(ge2_graph_add_activation(graph.get(), y, GE2_ACT_RELU, &y));
    GE2_CHECK(ge2_graph_mark_output(graph.get(), y, "y", nullptr));
    const auto [plan, json] = compile_and_describe(context.get(), graph.get());
    REQUIRE(json["steps"].size() == 1);  // GEMM + bias + residual + ReLU in one step
    const auto& problem = json["steps"][0]["problem"];
    CHECK(problem["beta"] == 1.0);
    CHECK(problem["has_bias"] == true);
    CHECK(problem["activation"] == "relu");
    CHECK(json["passes"][2]["notes"].dump().find("residual #0 as C") != std::string::npos);
    std::vector<float> hx(24), hw(36), hb(6), hy(24, std::nanf(""));
    for (std::size_t i = 0; i < hx.size(); ++i) hx[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    for (std::size_t i = 0; i < hw.size(); ++i) hw[i] = 0.05f * static_cast<float>(i % 5) - 0.1f;
    for (std::size_t i = 0; i < hb.size(); ++i) hb[i] = 0.2f * static_cast<float>(i) - 0.5f;
    ge2_binding_t bindings[] = {
        {"x", hx.data()}, {"w", hw.data()}, {"b", hb.data()}, {"y", hy.data()}};
    GE2_CHECK(ge2_plan_execute(plan.get(), bindings, 4, nullptr));
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) {
        double v = hb[static_cast<std::size_t>(j)] + hx[static_cast<std::size_t>(i * 6 + j)];
        for (int k = 0; k < 6; ++k)
          v += double(hx[static_cast<std::size_t>(i * 6 + k)]) *
               hw[static_cast<std::size_t>(k * 6 + j)];
        CHECK(hy[static_cast<std::size_t>(i * 6 + j)] ==
              doctest::Approx(v > 0 ? v : 0).epsilon(1e-5));
      }
  }
}

TEST_CASE("residual fusion is not done where it would change the result") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  ge2_tensor_desc_t dx{GE2_DTYPE_F32, 2, {4, 6}, {0, 0}}, dw{GE2_DTYPE_F32, 2, {6, 6}, {0, 0}},
      dr{GE2_DTYPE_F32, 1, {6}, {0}};
  ge2_value_t x, w, r, g, act, y1, y2, y3;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &dx, &x));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "w", &dw, &w));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "r", &dr, &r));
  // After an activation: act(AB) + x is not act(AB + x).
  GE2_CHECK(
      ge2_graph_add_gemm_bias_act(graph.get(), x, w, GE2_NO_VALUE, nullptr, GE2_ACT_RELU, &act));
  GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, act, x, &y1));
  // A broadcast residual is not a C operand.
  GE2_CHECK(ge2_graph_add_gemm(graph.get(), x, w, GE2_NO_VALUE, nullptr, &g));
  GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, g, r, &y2));
  // A multiply is not a residual.
  ge2_value_t g2;
  GE2_CHECK(ge2_graph_add_gemm(graph.get(), x, w, GE2_NO_VALUE, nullptr, &g2));
  GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_MUL, g2, x, &y3));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), y1, "y1", nullptr));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), y2, "y2", nullptr));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), y3, "y3", nullptr));
  const auto [plan, json] = compile_and_describe(context.get(), graph.get());
  CHECK(json["steps"].size() == 6);  // three GEMMs, three elementwise steps
  CHECK(json["passes"][2]["notes"].dump().find("as C") == std::string::npos);
}

TEST_CASE(
    "FFN blocks in nn.Linear layout match fp64: GELU MLP and SwiGLU, with and without "
    "residual, fused and unfused") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  for (const FfnCase& c : ffn_cases(5, 24, 40)) {
    const GemmResult r = run_ffn_case(context.get(), *memory, c);
    CHECK_MESSAGE(r.error <= 2 * tolerance(c.dtype), c.label() << " error " << r.error);
    const auto steps = nlohmann::json::parse(r.plan_json)["steps"];
    if (c.fuse && c.residual && c.kind == FfnKind::GeluMlp) {
      // GEMM+bias+GELU, then GEMM+bias+residual: two steps.
      CHECK(steps.size() == 2);
    }
    if (c.fuse && c.kind == FfnKind::SwiGlu && c.constant_weights) {
      // [gate | up] GEMM of width 2I with silu(gate) * up in its epilogue (cpu_ref has
      // the gated epilogue), down GEMM (+ residual as C).
      REQUIRE(steps.size() == 2);
      CHECK(steps[0]["op"] == "gemm");
      CHECK(steps[0]["problem"]["n"] == 2 * 40);
      CHECK(steps[0]["output"] == "[5, 40] " + std::string(c.dtype == GE2_DTYPE_F16    ? "f16"
                                                           : c.dtype == GE2_DTYPE_BF16 ? "bf16"
                                                                                       : "f32"));
      CHECK(steps[0]["gated_epilogue"].get<std::string>().find("(silu(gate) * up) computed") !=
            std::string::npos);
      // The unfused steps stay beside it for executions the fused step cannot take.
      CHECK(steps[0]["kernel"]["unaligned_pointers_run"].size() == 2);
    } else if (c.fuse && c.kind == FfnKind::SwiGlu) {
      // Weights bound per execution cannot be joined: gate GEMM, up GEMM, mul, down GEMM.
      REQUIRE(steps.size() == 4);
      CHECK(steps[0]["op"] == "gemm");
      CHECK(steps[2]["op"] == "mul");
      CHECK(steps[2]["input_activation"] == "silu");
      CHECK(r.plan_json.find("not concatenated: weight #") != std::string::npos);
    }
  }
}

TEST_CASE("constants: copied when added, owned by the plan, not bound, listed in the plan") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  std::vector<float> w(12), b(3);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i) - 2.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) + 0.25f;
  ge2_tensor_desc_t dx{GE2_DTYPE_F32, 2, {2, 4}, {0, 0}}, dw{GE2_DTYPE_F32, 2, {4, 3}, {0, 0}},
      db{GE2_DTYPE_F32, 1, {3}, {0}};
  ge2_value_t x, vw, vb, unused, y;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &dx, &x));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "w", &dw, w.data(), &vw));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "b", &db, b.data(), &vb));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "unused", &db, b.data(), &unused));
  const std::vector<float> w_given = w, b_given = b;
  std::fill(w.begin(), w.end(), std::nanf(""));  // the graph holds its own copy
  std::fill(b.begin(), b.end(), std::nanf(""));
  GE2_CHECK(ge2_graph_add_gemm_bias_act(graph.get(), x, vw, vb, nullptr, GE2_ACT_NONE, &y));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), y, "y", nullptr));
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context.get(), graph.get(), nullptr, &raw));
  PlanPtr plan(raw);
  graph.reset();  // the plan does not need the graph
  size_t io_count = 0;
  GE2_CHECK(ge2_plan_io_count(plan.get(), &io_count));
  CHECK(io_count == 2);  // x and y: constants are not bound
  const char* text = nullptr;
  GE2_CHECK(ge2_plan_describe(plan.get(), &text));
  const auto json = nlohmann::json::parse(text);
  CHECK(json["constant_bytes"] == 12 * 4 + 3 * 4);
  REQUIRE(json["constants"].size() == 2);  // the unused one was removed as dead
  CHECK(json["constants"][0]["name"] == "w");
  CHECK(json["constants"][1]["bytes"] == 12);
  std::vector<float> hx{1, 2, 3, 4, -1, 0.5f, 0, 2}, hy(6, std::nanf(""));
  ge2_binding_t bindings[] = {{"x", hx.data()}, {"y", hy.data()}};
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings, 2, nullptr));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double v = b_given[static_cast<std::size_t>(j)];
      for (int k = 0; k < 4; ++k)
        v += double(hx[static_cast<std::size_t>(i * 4 + k)]) *
             w_given[static_cast<std::size_t>(k * 3 + j)];
      CHECK(hy[static_cast<std::size_t>(i * 3 + j)] == doctest::Approx(v).epsilon(1e-6));
    }
  ge2_binding_t with_constant[] = {{"x", hx.data()}, {"y", hy.data()}, {"w", w.data()}};
  CHECK(ge2_plan_execute(plan.get(), with_constant, 3, nullptr) == GE2_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("constants: bad arguments are refused with the argument named") {
  auto graph = make_graph();
  float data[16] = {};
  ge2_tensor_desc_t d{GE2_DTYPE_F32, 2, {2, 2}, {0, 0}}, bad{GE2_DTYPE_F32, 4, {2, 2}, {0, 0}};
  ge2_value_t v, c, out = 5;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &d, &v));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "c", &d, data, &c));
  auto expect = [&](ge2_status_t got, ge2_status_t want, const char* function,
                    const char* fragment) {
    const std::string message = ge2_last_error();
    INFO(message);
    CHECK(got == want);
    CHECK(message.rfind(std::string(function) + ": ", 0) == 0);
    CHECK(message.find(fragment) != std::string::npos);
  };
  const char* f = "ge2_graph_add_constant";
  expect(ge2_graph_add_constant(graph.get(), "k", &d, nullptr, &out), GE2_ERROR_INVALID_ARGUMENT, f,
         "argument 'data' is NULL");
  expect(ge2_graph_add_constant(graph.get(), "k", nullptr, data, &out), GE2_ERROR_INVALID_ARGUMENT,
         f, "argument 'desc' is NULL");
  expect(ge2_graph_add_constant(graph.get(), "k", &bad, data, &out), GE2_ERROR_INVALID_ARGUMENT, f,
         "rank 4");
  expect(ge2_graph_add_constant(graph.get(), "x", &d, data, &out), GE2_ERROR_INVALID_ARGUMENT, f,
         "'x' is already an input");
  expect(ge2_graph_add_constant(graph.get(), "c", &d, data, &out), GE2_ERROR_INVALID_ARGUMENT, f,
         "'c' is already a constant");
  expect(ge2_graph_add_input(graph.get(), "c", &d, &out), GE2_ERROR_INVALID_ARGUMENT,
         "ge2_graph_add_input", "'c' is already a constant");
  expect(ge2_graph_add_constant(graph.get(), "", &d, data, &out), GE2_ERROR_INVALID_ARGUMENT, f,
         "argument 'name'");
  expect(ge2_graph_add_constant(graph.get(), "k", &d, data, nullptr), GE2_ERROR_INVALID_ARGUMENT, f,
         "argument 'out' is NULL");
  expect(ge2_graph_mark_output(graph.get(), c, "y", nullptr), GE2_ERROR_UNSUPPORTED,
         "ge2_graph_mark_output", "is the graph constant 'c'");
  expect(ge2_graph_mark_output(graph.get(), v, "c", nullptr), GE2_ERROR_INVALID_ARGUMENT,
         "ge2_graph_mark_output", "'c' is already a constant");
  // A constant larger than the host's memory is refused before anything is copied.
  ge2_tensor_desc_t huge{GE2_DTYPE_F32, 2, {std::int64_t{1} << 20, std::int64_t{1} << 19}, {0, 0}};
  expect(ge2_graph_add_constant(graph.get(), "huge", &huge, data, &out), GE2_ERROR_OUT_OF_MEMORY, f,
         "physical memory");
  CHECK(out == 5);
}

TEST_CASE("an activation cuBLASLt lacks moves into the multiply it feeds, on either operand") {
  auto context = make_context(GE2_DEVICE_CPU);
  for (ge2_activation_t act : {GE2_ACT_SILU, GE2_ACT_GELU_ERF, GE2_ACT_RELU})
    for (bool activation_second : {false, true}) {
      CAPTURE(act);
      CAPTURE(activation_second);
      auto graph = make_graph();
      ge2_tensor_desc_t dx{GE2_DTYPE_F32, 2, {3, 4}, {0, 0}}, dw{GE2_DTYPE_F32, 2, {4, 5}, {0, 0}};
      ge2_value_t x, w, u, g, a, y;
      GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &dx, &x));
      GE2_CHECK(ge2_graph_add_input(graph.get(), "w", &dw, &w));
      GE2_CHECK(ge2_graph_add_input(graph.get(), "u", &dw, &u));
      GE2_CHECK(ge2_graph_add_gemm(graph.get(), x, w, GE2_NO_VALUE, nullptr, &g));
      GE2_CHECK(ge2_graph_add_activation(graph.get(), g, act, &a));
      ge2_value_t up;
      GE2_CHECK(ge2_graph_add_gemm(graph.get(), x, u, GE2_NO_VALUE, nullptr, &up));
      GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_MUL,
                                          activation_second ? up : a, activation_second ? a : up,
                                          &y));
      GE2_CHECK(ge2_graph_mark_output(graph.get(), y, "y", nullptr));
      const auto [plan, json] = compile_and_describe(context.get(), graph.get());
      const auto& steps = json["steps"];
      if (act == GE2_ACT_RELU) {  // cuBLASLt's epilogue computes ReLU: it stays in the GEMM
        REQUIRE(steps.size() == 3);
        CHECK(steps[0]["op"] == "gemm_bias_act");
        CHECK_FALSE(steps[2].contains("input_activation"));
      } else {
        REQUIRE(steps.size() == 3);
        CHECK(steps[0]["op"] == "gemm");
        CHECK(steps[2]["input_activation"] == (act == GE2_ACT_SILU ? "silu" : "gelu_erf"));
      }
      std::vector<float> hx(12), hw(20), hu(20), hy(15, std::nanf(""));
      for (std::size_t i = 0; i < hx.size(); ++i) hx[i] = 0.3f * static_cast<float>(i % 5) - 0.6f;
      for (std::size_t i = 0; i < hw.size(); ++i) hw[i] = 0.2f * static_cast<float>(i % 7) - 0.5f;
      for (std::size_t i = 0; i < hu.size(); ++i) hu[i] = 0.1f * static_cast<float>(i % 3) + 0.2f;
      ge2_binding_t bindings[] = {
          {"x", hx.data()}, {"w", hw.data()}, {"u", hu.data()}, {"y", hy.data()}};
      GE2_CHECK(ge2_plan_execute(plan.get(), bindings, 4, nullptr));
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) {
          double gv = 0, uv = 0;
          for (int k = 0; k < 4; ++k) {
            gv += double(hx[static_cast<std::size_t>(i * 4 + k)]) *
                  hw[static_cast<std::size_t>(k * 5 + j)];
            uv += double(hx[static_cast<std::size_t>(i * 4 + k)]) *
                  hu[static_cast<std::size_t>(k * 5 + j)];
          }
          const double want = activation_ref(act, gv) * uv;
          CHECK(std::abs(hy[static_cast<std::size_t>(i * 5 + j)] - want) <=
                1e-5 * (1.0 + std::abs(want)));
        }
    }
}

TEST_CASE(
    "gated units: gate and up GEMMs become one GEMM of width 2I whose epilogue computes the "
    "gated_mul") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16, GE2_DTYPE_F32})
    for (ge2_activation_t act : {GE2_ACT_SILU, GE2_ACT_GELU_ERF, GE2_ACT_GELU_TANH, GE2_ACT_RELU,
                                 GE2_ACT_NONE, GE2_ACT_QUICK_GELU})
      for (bool trans_b : {true, false})
        for (bool bias : {false, true}) {
          const GluCase c{.dtype = dtype,
                          .act = act,
                          .tokens = 5,
                          .hidden = 24,
                          .intermediate = 40,
                          .trans_b = trans_b,
                          .bias = bias,
                          .act_on_second = bias};
          const GemmResult r = run_glu_case(context.get(), *memory, c);
          CHECK_MESSAGE(r.error <= tolerance(dtype), c.label() << " error " << r.error);
          const auto json = nlohmann::json::parse(r.plan_json);
          const auto& steps = json["steps"];
          // One step: cpu_ref computes the gated_mul in the GEMM's epilogue.
          REQUIRE_MESSAGE(steps.size() == 1, c.label() << r.plan_json);
          CHECK(steps[0]["problem"]["n"] == 80);
          CHECK(steps[0]["problem"]["has_bias"] == bias);
          // Even an activation a GEMM epilogue could compute moves into the gated multiply.
          CHECK(steps[0]["problem"]["activation"] == "none");
          constexpr const char* kNames[] = {"none",      "relu", "gelu_erf",
                                            "gelu_tanh", "silu", "quick_gelu"};
          CHECK(steps[0]["gated_epilogue"].get<std::string>().find(
                    std::string("(") + kNames[act] + "(gate) * up)") != std::string::npos);
          const auto& unfused = steps[0]["kernel"]["unaligned_pointers_run"];
          REQUIRE(unfused.size() == 2);
          CHECK(unfused[1]["name"] == "cpu_elementwise");
          // One constant holds both weights (and one both biases); the originals are gone.
          CHECK(json["constants"].size() == (bias ? 2u : 1u));
          // Without an activation the multiply's first operand is the first half.
          CHECK(json["constants"][0]["name"] ==
                (act == GE2_ACT_NONE && c.act_on_second ? "w_up+w_gate" : "w_gate+w_up"));
          CHECK(json["constant_bytes"] ==
                (2 * 24 * 40 + (bias ? 80 : 0)) * (dtype == GE2_DTYPE_F32 ? 4 : 2));
        }
}

TEST_CASE("gated units: the fused epilogue writes padded and offset outputs, nothing else") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_F32})
    for (std::int64_t pad_y : {1, 3, 8}) {
      const GluCase c{.dtype = dtype,
                      .act = GE2_ACT_GELU_ERF,
                      .tokens = 7,
                      .hidden = 16,
                      .intermediate = 12,
                      .bias = true,
                      .x_offset = 1,
                      .pad_y = pad_y,
                      .y_offset = pad_y % 2};
      const GemmResult r = run_glu_case(context.get(), *memory, c);
      CHECK_MESSAGE(r.error <= tolerance(dtype), c.label() << " error " << r.error);
      CHECK_MESSAGE(r.padding_changed == 0, c.label() << " wrote into y's row padding");
      const auto steps = nlohmann::json::parse(r.plan_json)["steps"];
      REQUIRE(steps.size() == 1);
      CHECK(steps[0]["gated_epilogue"].get<std::string>().find("computed in the epilogue") !=
            std::string::npos);
    }
}

TEST_CASE("gated units: left apart when joining would change what runs, and the plan says why") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  struct Variant {
    GluCase c;
    const char* why;  // expected in the plan's notes
  };
  const Variant variants[] = {
      {{.constant_weights = false}, "not concatenated: weight #"},
      {{.fuse = false}, ""},
  };
  for (const Variant& v : variants) {
    const GemmResult r = run_glu_case(context.get(), *memory, v.c);
    CHECK_MESSAGE(r.error <= tolerance(v.c.dtype), v.c.label() << " error " << r.error);
    const auto json = nlohmann::json::parse(r.plan_json);
    CHECK(r.plan_json.find("gated_mul") == std::string::npos);
    CHECK(r.plan_json.find(v.why) != std::string::npos);
  }
}
