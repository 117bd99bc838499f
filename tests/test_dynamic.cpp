// Dynamic extent on the CPU backend: one plan per FFN block runs every token
// count up to its bound against fp64, with buffers sized for exactly that many
// rows (ASan sees any read past them); the bucket table; refusals of graphs
// and extents; a batch-dynamic GEMM; concurrent executions at different extents.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "support/api_helpers.hpp"

using namespace ge2::test;

namespace {

nlohmann::json describe(const ge2_plan_t* plan) {
  const char* text = nullptr;
  GE2_CHECK(ge2_plan_describe(plan, &text));
  return nlohmann::json::parse(text);
}

}  // namespace

TEST_CASE("dynamic extent: one FFN plan runs every token count 1..300 and a spread to its bound") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  DynamicFfn gelu(context.get(), GE2_DTYPE_F32, FfnKind::GeluMlp, 1000, 24, 40, true);
  for (std::int64_t tokens = 1; tokens <= 300; ++tokens)
    CHECK(gelu.run(*memory, tokens) <= tolerance(GE2_DTYPE_F32));
  // Beyond the 128 kept step lists: the early extents were evicted and are rebuilt.
  for (std::int64_t tokens : {1, 2, 300, 301, 511, 512, 513, 700, 999, 1000, 3})
    CHECK(gelu.run(*memory, tokens) <= tolerance(GE2_DTYPE_F32));

  for (ge2_dtype_t dtype : {GE2_DTYPE_BF16, GE2_DTYPE_F16})
    for (bool residual : {false, true}) {
      CAPTURE(dtype);
      CAPTURE(residual);
      DynamicFfn swiglu(context.get(), dtype, FfnKind::SwiGlu, 257, 16, 48, residual);
      for (std::int64_t tokens : {1, 2, 3, 8, 17, 64, 100, 256, 257})
        CHECK(swiglu.run(*memory, tokens) <= tolerance(dtype));
    }
}

TEST_CASE("dynamic extent: the plan lists its buckets, reports its bound and its dynamic ios") {
  auto context = make_context(GE2_DEVICE_CPU);
  DynamicFfn ffn(context.get(), GE2_DTYPE_F32, FfnKind::GeluMlp, 1000, 8, 16, false);
  const nlohmann::json plan = describe(ffn.plan.get());
  REQUIRE(plan.contains("dynamic"));
  CHECK(plan["dynamic"]["max_extent"] == 1000);
  const auto& buckets = plan["dynamic"]["buckets"];
  // 1, 2, 3-4, ..., 129-256, then 257-512, 513-768, 769-1000.
  REQUIRE(buckets.size() == 12);
  std::int64_t next = 1;
  for (const auto& bucket : buckets) {
    CHECK(bucket["first"] == next);
    CHECK(bucket["gemms"].size() == 2);
    for (const auto& gemm : bucket["gemms"]) CHECK(gemm["kernel"] == "cpu_ref");
    next = bucket["last"].get<std::int64_t>() + 1;
  }
  CHECK(next == 1001);
  CHECK(buckets[2]["last"] == 4);
  CHECK(buckets[9]["last"] == 512);
  CHECK(plan["io"][0]["type"] == "[1..1000, 8] f32");

  std::int64_t bound = 0;
  GE2_CHECK(ge2_plan_get_max_extent(ffn.plan.get(), &bound));
  CHECK(bound == 1000);
  size_t count = 0;
  GE2_CHECK(ge2_plan_io_count(ffn.plan.get(), &count));
  REQUIRE(count == 2);
  for (size_t i = 0; i < count; ++i) {
    int dynamic = -1;
    GE2_CHECK(ge2_plan_io_is_dynamic(ffn.plan.get(), i, &dynamic));
    CHECK(dynamic == 1);
    ge2_io_info_t info;
    GE2_CHECK(ge2_plan_io_info(ffn.plan.get(), i, &info));
    CHECK(info.desc.shape[0] == 1000);  // described at the bound
  }
  int dynamic = -1;
  expect_refusal(ge2_plan_io_is_dynamic(ffn.plan.get(), 2, &dynamic), GE2_ERROR_INVALID_ARGUMENT,
                 "argument 'index' = 2 is out of range");
  CHECK(dynamic == -1);
}

TEST_CASE("dynamic extent: ge2_plan_execute runs at the bound; a fixed plan reports no extent") {
  auto context = make_context(GE2_DEVICE_CPU);
  DynamicFfn ffn(context.get(), GE2_DTYPE_F32, FfnKind::SwiGlu, 37, 8, 24, true);
  HostTensor x = make_tensor(GE2_DTYPE_F32, {37, 8}), y = make_tensor(GE2_DTYPE_F32, {37, 8});
  fill_random(x);
  poison(y);
  const ge2_binding_t bindings[] = {{"x", x.data()}, {"y", y.data()}};
  GE2_CHECK(ge2_plan_execute(ffn.plan.get(), bindings, 2, nullptr));
  CHECK(relative_error(y, ffn_reference(ffn.kind, true, x, ffn.weights)) <=
        tolerance(GE2_DTYPE_F32));
  // At extent 5 in the same buffers: rows 5.. of y are not written.
  poison(y);
  GE2_CHECK(ge2_plan_execute_dynamic(ffn.plan.get(), 5, bindings, 2, nullptr));
  int written_past = 0, written = 0;
  for (std::int64_t r = 0; r < 37; ++r)
    for (std::int64_t j = 0; j < 8; ++j) {
      const bool is_nan = std::isnan(y.get(y.offset(0, r, j)));
      written += r < 5 && !is_nan;
      written_past += r >= 5 && !is_nan;
    }
  CHECK(written == 5 * 8);
  CHECK(written_past == 0);

  // A graph without dynamic inputs: bound 0, ios fixed, the dynamic call refused.
  auto graph = make_graph();
  const ge2_tensor_desc_t d{GE2_DTYPE_F32, 2, {4, 4}, {0, 0}};
  ge2_value_t a, out;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "a", &d, &a));
  GE2_CHECK(ge2_graph_add_gemm(graph.get(), a, a, GE2_NO_VALUE, nullptr, &out));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), out, "d", nullptr));
  PlanPtr fixed = compile_plan(context.get(), graph.get(), true);
  std::int64_t bound = -1;
  GE2_CHECK(ge2_plan_get_max_extent(fixed.get(), &bound));
  CHECK(bound == 0);
  int dynamic = -1;
  GE2_CHECK(ge2_plan_io_is_dynamic(fixed.get(), 0, &dynamic));
  CHECK(dynamic == 0);
  HostTensor ta = make_tensor(GE2_DTYPE_F32, {4, 4}), td = make_tensor(GE2_DTYPE_F32, {4, 4});
  const ge2_binding_t fixed_bindings[] = {{"a", ta.data()}, {"d", td.data()}};
  expect_refusal(ge2_plan_execute_dynamic(fixed.get(), 4, fixed_bindings, 2, nullptr),
                 GE2_ERROR_INVALID_ARGUMENT,
                 "ge2_plan_execute_dynamic: argument 'plan' has no dynamic extent");
  expect_refusal(ge2_plan_get_max_extent(nullptr, &bound), GE2_ERROR_INVALID_ARGUMENT,
                 "argument 'plan'");
  expect_refusal(ge2_plan_get_max_extent(fixed.get(), nullptr), GE2_ERROR_INVALID_ARGUMENT,
                 "argument 'out'");
}

TEST_CASE("dynamic extent: extents outside [1, bound] and bad bindings are refused") {
  auto context = make_context(GE2_DEVICE_CPU);
  DynamicFfn ffn(context.get(), GE2_DTYPE_F32, FfnKind::GeluMlp, 16, 8, 16, false);
  HostTensor x = make_tensor(GE2_DTYPE_F32, {16, 8}), y = make_tensor(GE2_DTYPE_F32, {16, 8});
  fill_random(x);
  poison(y);
  const ge2_binding_t bindings[] = {{"x", x.data()}, {"y", y.data()}};
  for (std::int64_t extent :
       {std::int64_t{0}, std::int64_t{-1}, std::int64_t{17}, std::int64_t{1} << 40}) {
    CAPTURE(extent);
    const std::string fragment =
        fmt::format("argument 'extent' = {} is outside the plan's [1, 16]", extent);
    expect_refusal(ge2_plan_execute_dynamic(ffn.plan.get(), extent, bindings, 2, nullptr),
                   GE2_ERROR_INVALID_ARGUMENT, fragment.c_str());
  }
  CHECK(std::isnan(y.get(0)));  // nothing ran
  const ge2_binding_t unbound[] = {{"x", x.data()}};
  expect_refusal(ge2_plan_execute_dynamic(ffn.plan.get(), 3, unbound, 1, nullptr),
                 GE2_ERROR_INVALID_ARGUMENT, "output 'y' is not bound");
  // At extent 3, x and y span 3 rows: the message gives those bytes, not the bound's.
  const ge2_binding_t overlapping[] = {{"x", x.data()}, {"y", x.data()}};
  expect_refusal(ge2_plan_execute_dynamic(ffn.plan.get(), 3, overlapping, 2, nullptr),
                 GE2_ERROR_INVALID_ARGUMENT, "overlaps input 'x' (96 bytes");
  expect_refusal(ge2_plan_execute_dynamic(nullptr, 3, bindings, 2, nullptr),
                 GE2_ERROR_INVALID_ARGUMENT, "argument 'plan' is NULL");
}

TEST_CASE("dynamic extent: graphs that would make it K, N or an inner dimension are refused") {
  const ge2_tensor_desc_t x_desc{GE2_DTYPE_F32, 2, {64, 8}, {0, 0}},
      w_desc{GE2_DTYPE_F32, 2, {8, 8}, {0, 0}}, v_desc{GE2_DTYPE_F32, 1, {8}, {0}},
      batch_desc{GE2_DTYPE_F32, 3, {2, 64, 8}, {0, 0, 0}},
      batch_w_desc{GE2_DTYPE_F32, 3, {2, 8, 8}, {0, 0, 0}},
      column_major{GE2_DTYPE_F32, 2, {64, 8}, {1, 64}};
  auto graph = make_graph();
  ge2_value_t x, w, fixed, batched, batched_w, out = 99;
  GE2_CHECK(ge2_graph_add_dynamic_input(graph.get(), "x", &x_desc, &x));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "w", &w_desc,
                                   make_tensor(GE2_DTYPE_F32, {8, 8}).data(), &w));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "fixed", &x_desc, &fixed));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "batched", &batch_desc, &batched));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "batched_w", &batch_w_desc, &batched_w));
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_a = 1;  // x [64, 8] transposed: its dynamic dimension becomes K
  ge2_value_t k_dynamic;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "k8", &x_desc, &k_dynamic));
  expect_refusal(ge2_graph_add_gemm(graph.get(), x, k_dynamic, GE2_NO_VALUE, &attrs, &out),
                 GE2_ERROR_SHAPE_MISMATCH, "argument 'a': [1..64, 8] f32 is transposed");
  attrs.trans_a = 0;
  attrs.trans_b = 1;
  expect_refusal(ge2_graph_add_gemm(graph.get(), fixed, x, GE2_NO_VALUE, &attrs, &out),
                 GE2_ERROR_SHAPE_MISMATCH, "which is B's N");
  expect_refusal(ge2_graph_add_gemm(graph.get(), x, batched_w, GE2_NO_VALUE, nullptr, &out),
                 GE2_ERROR_SHAPE_MISMATCH, "would be dimension 1 of the batched result");
  expect_refusal(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, x, fixed, &out),
                 GE2_ERROR_SHAPE_MISMATCH, "must both have a dynamic leading dimension");
  CHECK(out == 99);
  // A fixed operand broadcast over the dynamic rows is fine; a dynamic one
  // broadcast over a fixed batch is not.
  ge2_value_t ok, v;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "v", &v_desc, &v));
  GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, x, v, &ok));
  expect_refusal(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, batched, x, &out),
                 GE2_ERROR_SHAPE_MISMATCH, "a broadcast b has none");

  ge2_value_t bad;
  expect_refusal(ge2_graph_add_dynamic_input(graph.get(), "rank1", &v_desc, &bad),
                 GE2_ERROR_INVALID_ARGUMENT, "needs rank 2 or 3 and dimension 0 outermost");
  expect_refusal(ge2_graph_add_dynamic_input(graph.get(), "cm", &column_major, &bad),
                 GE2_ERROR_INVALID_ARGUMENT, "strides [1, 64, 0]");
  // An output layout of a dynamic value follows the same rule.
  expect_refusal(ge2_graph_mark_output(graph.get(), ok, "y", &column_major),
                 GE2_ERROR_INVALID_ARGUMENT, "argument 'layout'");
}

TEST_CASE("dynamic extent: dynamic inputs with different bounds are refused at compile") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  const ge2_tensor_desc_t a_desc{GE2_DTYPE_F32, 2, {64, 8}, {0, 0}},
      b_desc{GE2_DTYPE_F32, 2, {32, 8}, {0, 0}}, w_desc{GE2_DTYPE_F32, 2, {8, 8}, {0, 0}};
  ge2_value_t a, b, w, ya, yb;
  GE2_CHECK(ge2_graph_add_dynamic_input(graph.get(), "a", &a_desc, &a));
  GE2_CHECK(ge2_graph_add_dynamic_input(graph.get(), "b", &b_desc, &b));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "w", &w_desc, &w));
  GE2_CHECK(ge2_graph_add_gemm(graph.get(), a, w, GE2_NO_VALUE, nullptr, &ya));
  GE2_CHECK(ge2_graph_add_gemm(graph.get(), b, w, GE2_NO_VALUE, nullptr, &yb));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), ya, "ya", nullptr));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), yb, "yb", nullptr));
  ge2_plan_t* plan = nullptr;
  expect_refusal(ge2_plan_compile(context.get(), graph.get(), nullptr, &plan),
                 GE2_ERROR_SHAPE_MISMATCH, "dynamic input 'b' has bound 32 but 'a' has 64");
  CHECK(plan == nullptr);
}

TEST_CASE("dynamic extent: a batch-dynamic GEMM with a shared weight runs every batch count") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  const std::int64_t max_batch = 6, m = 5, k = 12, n = 7;
  const ge2_tensor_desc_t a_desc{GE2_DTYPE_F32, 3, {max_batch, m, k}, {0, 0, 0}};
  HostTensor w = make_tensor(GE2_DTYPE_F32, {n, k}), bias = make_tensor(GE2_DTYPE_F32, {n});
  fill_random(w);
  fill_random(bias);
  const ge2_tensor_desc_t w_desc = w.desc(), bias_desc = bias.desc();
  ge2_value_t a, vw, vb, d;
  GE2_CHECK(ge2_graph_add_dynamic_input(graph.get(), "a", &a_desc, &a));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "w", &w_desc, w.data(), &vw));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "bias", &bias_desc, bias.data(), &vb));
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_b = 1;
  GE2_CHECK(ge2_graph_add_gemm_bias_act(graph.get(), a, vw, vb, &attrs, GE2_ACT_RELU, &d));
  ge2_tensor_desc_t d_desc;
  GE2_CHECK(ge2_graph_get_desc(graph.get(), d, &d_desc));
  CHECK(d_desc.shape[0] == max_batch);
  GE2_CHECK(ge2_graph_mark_output(graph.get(), d, "d", nullptr));
  PlanPtr plan = compile_plan(context.get(), graph.get(), true);
  for (std::int64_t batch = 1; batch <= max_batch; ++batch) {
    CAPTURE(batch);
    HostTensor ta = make_tensor(GE2_DTYPE_F32, {batch, m, k}),
               td = make_tensor(GE2_DTYPE_F32, {batch, m, n});
    fill_random(ta);
    poison(td);
    const ge2_binding_t bindings[] = {{"a", ta.data()}, {"d", td.data()}};
    GE2_CHECK(ge2_plan_execute_dynamic(plan.get(), batch, bindings, 2, nullptr));
    GemmRef ref;
    ref.trans_b = true;
    ref.act = GE2_ACT_RELU;
    CHECK(relative_error(td, gemm_reference(ta, w, nullptr, &bias, ref)) <=
          tolerance(GE2_DTYPE_F32));
  }
}

TEST_CASE("dynamic extent: threads executing one plan at different extents all get right results") {
  auto context = make_context(GE2_DEVICE_CPU);
  DynamicFfn ffn(context.get(), GE2_DTYPE_F32, FfnKind::SwiGlu, 300, 16, 32, true);
  // Inputs and references made up front: the test oracle's generator is not thread-safe.
  const std::int64_t extents[] = {1, 7, 64, 300, 129, 2};
  struct Work {
    HostTensor x, y;
    std::vector<double> ref;
    std::atomic<int> failures{0};
    double worst = 0;
  };
  std::vector<std::unique_ptr<Work>> work;
  for (std::int64_t extent : extents) {
    auto w = std::make_unique<Work>();
    w->x = make_tensor(GE2_DTYPE_F32, {extent, 16});
    fill_random(w->x);
    w->y = make_tensor(GE2_DTYPE_F32, {extent, 16});
    w->ref = ffn_reference(ffn.kind, true, w->x, ffn.weights);
    work.push_back(std::move(w));
  }
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < work.size(); ++t) {
    threads.emplace_back([&, t] {
      Work& w = *work[t];
      for (int round = 0; round < 20; ++round) {
        poison(w.y);
        const ge2_binding_t bindings[] = {{"x", w.x.data()}, {"y", w.y.data()}};
        if (ge2_plan_execute_dynamic(ffn.plan.get(), extents[t], bindings, 2, nullptr) != GE2_OK)
          ++w.failures;
        w.worst = std::max(w.worst, relative_error(w.y, w.ref));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& w : work) {
    CHECK(w->failures == 0);
    CHECK(w->worst <= tolerance(GE2_DTYPE_F32));
  }
}
