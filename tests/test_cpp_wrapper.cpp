// The header-only C++ wrapper (include/ge_v2_api.hpp): RAII handles that
// outlive each other in any order, exceptions with the status and the
// library's message, and a gated block with a dynamic token count built
// through it against fp64.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "ge_v2_api.hpp"

TEST_CASE(
    "C++ wrapper: a SwiGLU block with constant weights and a dynamic token count matches fp64") {
  constexpr std::int64_t t = 4, h = 12, n = 20;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](std::size_t count, float scale) {
    std::vector<float> v(count);
    for (float& e : v) e = dist(rng) * scale;
    return v;
  };
  const std::vector<float> x = random(t * h, 1.0f), wg = random(n * h, 0.3f),
                           wu = random(n * h, 0.3f);
  ge2::cxx::Plan plan = [&] {
    ge2::cxx::Context context = ge2::cxx::Context::on(GE2_DEVICE_CPU);
    ge2::cxx::Graph graph;
    const ge2_value_t vx = graph.dynamic_input("x", {GE2_DTYPE_F32, 2, {3 * t, h}, {}});
    const ge2_tensor_desc_t w_desc{GE2_DTYPE_F32, 2, {n, h}, {}};
    const ge2_value_t gate = graph.activation(
        graph.gemm(vx, graph.constant("wg", w_desc, wg.data()), ge2::cxx::linear()), GE2_ACT_SILU);
    const ge2_value_t up =
        graph.gemm(vx, graph.constant("wu", w_desc, wu.data()), ge2::cxx::linear());
    graph.output(graph.mul(gate, up), "y");
    CHECK(graph.desc(up).shape[1] == n);
    return ge2::cxx::Plan(context, graph);  // the plan outlives its context and graph
  }();
  const auto io = plan.io();
  REQUIRE(io.size() == 2);
  CHECK(io[1].is_output == 1);
  CHECK((plan.is_dynamic(0) && plan.is_dynamic(1)));
  CHECK_THROWS_AS((void)plan.is_dynamic(2), ge2::cxx::Error);
  CHECK(io[0].desc.shape[0] == 3 * t);
  CHECK(plan.max_extent() == 3 * t);
  CHECK(plan.describe().find("gated_mul") != std::string::npos);

  std::vector<float> y(t * n, NAN);
  ge2::cxx::Plan moved = std::move(plan);
  moved.execute(t, {{"x", const_cast<float*>(x.data())}, {"y", y.data()}});
  double diff = 0, norm = 0;
  for (std::int64_t r = 0; r < t; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      double g = 0, u = 0;
      for (std::int64_t k = 0; k < h; ++k) {
        g += double(x[r * h + k]) * wg[j * h + k];
        u += double(x[r * h + k]) * wu[j * h + k];
      }
      const double want = g / (1 + std::exp(-g)) * u;
      diff += (y[r * n + j] - want) * (y[r * n + j] - want);
      norm += want * want;
    }
  CHECK(std::sqrt(diff / norm) <= 1e-5);
}

TEST_CASE("C++ wrapper: a failing call throws ge2::cxx::Error with the status and message") {
  ge2::cxx::Graph graph;
  const ge2_value_t a = graph.input("a", {GE2_DTYPE_F32, 2, {2, 3}, {}});
  const ge2_value_t b = graph.input("b", {GE2_DTYPE_F32, 2, {3, 2}, {}});
  try {
    (void)graph.add(a, b);
    FAIL("a shape mismatch did not throw");
  } catch (const ge2::cxx::Error& e) {
    CHECK(e.status() == GE2_ERROR_SHAPE_MISMATCH);
    CHECK(std::string(e.what()).find("ge2_graph_add_elementwise: argument 'b'") !=
          std::string::npos);
  }
  CHECK_THROWS_AS(graph.input("a", {GE2_DTYPE_F32, 2, {2, 3}, {}}), ge2::cxx::Error);
  ge2::cxx::Context context = ge2::cxx::Context::on(GE2_DEVICE_CPU);
  CHECK(context.device_kind() == GE2_DEVICE_CPU);
  // No output marked: compiling is refused, and nothing leaks (ASan runs this).
  CHECK_THROWS_WITH_AS(ge2::cxx::Plan(context, graph), doctest::Contains("no outputs"),
                       ge2::cxx::Error);
}

TEST_CASE("C++ wrapper: a quantized constant reads e4m3 * scale, and a bad one throws") {
  // y = x w with w given as e4m3 codes [2, 3] and one scale per row: x = I gives w back.
  const std::uint8_t codes[6] = {0x38, 0x40, 0xb8, 0x30, 0x7e, 0x00};  // 1, 2, -1; 0.5, 448, 0
  const float scales[2] = {0.25f, 2.0f};
  ge2::cxx::Context context = ge2::cxx::Context::on(GE2_DEVICE_CPU);
  ge2::cxx::Graph graph;
  const ge2_value_t vx = graph.input("x", {GE2_DTYPE_F32, 2, {2, 2}, {}});
  const ge2_value_t vw =
      graph.quantized_constant("w", {GE2_DTYPE_F32, 2, {2, 3}, {}}, codes, scales, 2, 0);
  graph.output(graph.gemm(vx, vw), "y");
  ge2::cxx::Plan plan(context, graph);
  std::vector<float> x{1, 0, 0, 1}, y(6, NAN);
  plan.execute({{"x", x.data()}, {"y", y.data()}});
  CHECK(y == std::vector<float>{0.25f, 0.5f, -0.25f, 1.0f, 896.0f, 0.0f});
  CHECK_THROWS_WITH_AS(
      graph.quantized_constant("v", {GE2_DTYPE_F16, 2, {2, 3}, {}}, codes, scales, 1, 0),
      doctest::Contains("argument 'scale_count' = 1 must be 2"), ge2::cxx::Error);
  // The same codes in blocks of 1 x 2: scales (0.25, 2) on row 0's columns 0-1 and 2,
  // (4, 0.5) on row 1's.
  const float block_scales[4] = {0.25f, 2.0f, 4.0f, 0.5f};
  ge2::cxx::Graph blocked;
  const ge2_value_t bx = blocked.input("x", {GE2_DTYPE_F32, 2, {2, 2}, {}});
  const ge2_value_t bw = blocked.block_quantized_constant("w", {GE2_DTYPE_F32, 2, {2, 3}, {}},
                                                          codes, block_scales, 4, 1, 2);
  blocked.output(blocked.gemm(bx, bw), "y");
  ge2::cxx::Plan block_plan(context, blocked);
  block_plan.execute({{"x", x.data()}, {"y", y.data()}});
  CHECK(y == std::vector<float>{0.25f, 0.5f, -2.0f, 2.0f, 1792.0f, 0.0f});
  CHECK_THROWS_WITH_AS(blocked.block_quantized_constant("v", {GE2_DTYPE_F32, 2, {2, 3}, {}}, codes,
                                                        block_scales, 4, 2, 2),
                       doctest::Contains("argument 'scale_count' = 4 must be 2"), ge2::cxx::Error);
}

TEST_CASE("C++ wrapper: the one-shot call and the version queries") {
  CHECK(ge2::cxx::api_version() == GE2_API_VERSION);
  CHECK(ge2::cxx::version().rfind("2.", 0) == 0);
  constexpr std::int64_t m = 5, n = 7, k = 9;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(m * k), b(n * k), bias(n), d(m * n, NAN);
  for (auto* v : {&a, &b, &bias})
    for (float& e : *v) e = dist(rng);
  const ge2::cxx::Context context = ge2::cxx::Context::on(GE2_DEVICE_CPU);
  ge2_gemm_params_t params = ge2::cxx::gemm_params();
  params.m = m, params.n = n, params.k = k, params.trans_b = 1;  // b is [n, k], as nn.Linear's
  params.lda = k, params.ldb = k, params.ldd = n;
  params.dtype = GE2_DTYPE_F32, params.activation = GE2_ACT_RELU, params.has_bias = 1;
  ge2::cxx::gemm_bias_act(context, params, a.data(), b.data(), bias.data(), d.data());
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = bias[j];
      for (std::int64_t p = 0; p < k; ++p) sum += double(a[i * k + p]) * b[j * k + p];
      const double want = sum > 0 ? sum : 0;
      diff += (d[i * n + j] - want) * (d[i * n + j] - want);
      norm += want * want;
    }
  CHECK(std::sqrt(diff / norm) <= 1e-6);
  params.has_bias = 0;  // bias given without has_bias: refused, naming the argument
  try {
    ge2::cxx::gemm_bias_act(context, params, a.data(), b.data(), bias.data(), d.data());
    FAIL("no error");
  } catch (const ge2::cxx::Error& e) {
    CHECK(e.status() == GE2_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("bias") != std::string::npos);
  }
}
