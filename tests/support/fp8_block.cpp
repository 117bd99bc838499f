#include "support/fp8_block.hpp"

#include <doctest/doctest.h>

#include <vector>

namespace ge2::test {

Fp8BlockResult run_fp8_block(ge2_context_t* context, Memory& memory, const Fp8BlockCase& c) {
  const ge2_dtype_t dtype = c.dtype;
  HostTensor w1 = make_tensor(dtype, {c.inter, c.hidden}), b1 = make_tensor(dtype, {c.inter});
  HostTensor w2 = make_tensor(dtype, {c.hidden, c.inter}), b2 = make_tensor(dtype, {c.hidden});
  fill_random(w1, -0.0625, 0.0625);
  fill_random(b1, -0.5, 0.5);
  fill_random(w2, -0.0442, 0.0442);
  fill_random(b2, -0.5, 0.5);
  HostTensor x = make_tensor(dtype, {c.tokens, c.hidden});
  fill_random(x);
  const HostTensor h_shape = make_tensor(dtype, {c.tokens, c.inter});
  const ge2_tensor_desc_t dx = x.desc(), dh = h_shape.desc(), dw1 = w1.desc(), db1 = b1.desc(),
                          dw2 = w2.desc(), db2 = b2.desc();
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_b = 1;
  ge2_compile_options_t options;
  GE2_CHECK(ge2_compile_options_init(&options));
  options.allow_fp8 = 1;
  options.force_kernel = c.force_kernel;
  auto compile = [&](GraphPtr& graph) {
    ge2_plan_t* raw = nullptr;
    GE2_CHECK(ge2_plan_compile(context, graph.get(), &options, &raw));
    return PlanPtr(raw);
  };
  // act(in wᵀ + b), w and b constants under the given names.
  auto layer = [&](ge2_graph_t* g, ge2_value_t in, const char* w_name, const ge2_tensor_desc_t& dw,
                   HostTensor& w, const char* b_name, const ge2_tensor_desc_t& db, HostTensor& b,
                   ge2_activation_t act) {
    ge2_value_t vw, vb, out;
    GE2_CHECK(ge2_graph_add_constant(g, w_name, &dw, w.data(), &vw));
    GE2_CHECK(ge2_graph_add_constant(g, b_name, &db, b.data(), &vb));
    GE2_CHECK(ge2_graph_add_gemm_bias_act(g, in, vw, vb, &attrs, act, &out));
    return out;
  };

  GraphPtr one = make_graph();
  ge2_value_t vx;
  GE2_CHECK(ge2_graph_add_input(one.get(), "x", &dx, &vx));
  const ge2_value_t vh = layer(one.get(), vx, "w1", dw1, w1, "b1", db1, b1, c.act);
  GE2_CHECK(ge2_graph_mark_output(
      one.get(), layer(one.get(), vh, "w2", dw2, w2, "b2", db2, b2, GE2_ACT_NONE), "y", nullptr));
  if (c.h_also_output) GE2_CHECK(ge2_graph_mark_output(one.get(), vh, "h", nullptr));
  const PlanPtr one_plan = compile(one);

  GraphPtr first = make_graph(), second = make_graph();
  GE2_CHECK(ge2_graph_add_input(first.get(), "x", &dx, &vx));
  GE2_CHECK(ge2_graph_mark_output(
      first.get(), layer(first.get(), vx, "w1", dw1, w1, "b1", db1, b1, c.act), "h", nullptr));
  ge2_value_t vh2;
  GE2_CHECK(ge2_graph_add_input(second.get(), "h", &dh, &vh2));
  GE2_CHECK(ge2_graph_mark_output(
      second.get(), layer(second.get(), vh2, "w2", dw2, w2, "b2", db2, b2, GE2_ACT_NONE), "y",
      nullptr));
  const PlanPtr first_plan = compile(first), second_plan = compile(second);

  Fp8BlockResult result;
  const char* text = nullptr;
  GE2_CHECK(ge2_plan_describe(one_plan.get(), &text));
  const nlohmann::json plan_text = nlohmann::json::parse(text);
  std::vector<nlohmann::json> gemms;
  for (const auto& step : plan_text.at("steps"))
    if (step.contains("selection")) gemms.push_back(step);
  REQUIRE(gemms.size() == 2);
  result.first = gemms[0];
  result.second = gemms[1];

  HostTensor y_one = make_tensor(dtype, {c.tokens, c.hidden}), y_two = y_one;
  // y_one's elements from element 1 of y_wide when misaligned_y.
  HostTensor y_wide = make_tensor(dtype, {c.tokens * c.hidden + 8});
  poison(y_wide);
  HostTensor h_one = make_tensor(dtype, {c.tokens, c.inter}), h_two = h_one;
  poison(y_one);
  poison(y_two);
  poison(h_one);
  poison(h_two);
  void* px = memory.upload(x);
  void* py_one = c.misaligned_y
                     ? static_cast<unsigned char*>(memory.upload(y_wide)) + y_wide.element_size()
                     : memory.upload(y_one);
  void* ph_one = memory.upload(h_one);
  void* ph_two = memory.upload(h_two);
  void* py_two = memory.upload(y_two);
  const ge2_binding_t one_bindings[] = {{"x", px}, {"y", py_one}, {"h", ph_one}};
  GE2_CHECK(
      ge2_plan_execute(one_plan.get(), one_bindings, c.h_also_output ? 3 : 2, memory.stream()));
  const ge2_binding_t first_bindings[] = {{"x", px}, {"h", ph_two}};
  GE2_CHECK(ge2_plan_execute(first_plan.get(), first_bindings, 2, memory.stream()));
  const ge2_binding_t second_bindings[] = {{"h", ph_two}, {"y", py_two}};
  GE2_CHECK(ge2_plan_execute(second_plan.get(), second_bindings, 2, memory.stream()));
  if (c.misaligned_y) {
    memory.download(static_cast<unsigned char*>(py_one) - y_wide.element_size(), y_wide);
    for (std::int64_t i = 0; i < c.tokens * c.hidden; ++i) y_one.set(i, y_wide.get(i + 1));
  } else {
    memory.download(py_one, y_one);
  }
  memory.download(py_two, y_two);
  std::vector<double> two(static_cast<std::size_t>(c.tokens * c.hidden));
  for (std::size_t i = 0; i < two.size(); ++i) two[i] = y_two.get(static_cast<std::int64_t>(i));
  result.one_vs_two_plans = relative_error(y_one, two);
  if (c.h_also_output) {
    memory.download(ph_one, h_one);
    memory.download(ph_two, h_two);
    std::vector<double> h(static_cast<std::size_t>(c.tokens * c.inter));
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = h_two.get(static_cast<std::int64_t>(i));
    CHECK(relative_error(h_one, h) == 0.0);  // h as stored: activated
  }

  const std::vector<double> h_ref =
      gemm_reference(x, w1, nullptr, &b1, {.trans_b = true, .act = c.act});
  std::vector<double> want(two.size());
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    for (std::int64_t j = 0; j < c.hidden; ++j) {
      double sum = b2.get(j);
      for (std::int64_t k = 0; k < c.inter; ++k)
        sum += h_ref[static_cast<std::size_t>(t * c.inter + k)] * w2.get(j * c.inter + k);
      want[static_cast<std::size_t>(t * c.hidden + j)] = sum;
    }
  }
  result.vs_fp64 = relative_error(y_one, want);
  return result;
}

}  // namespace ge2::test
