// Every bad input gets a status and a message naming the argument and value.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "support/api_helpers.hpp"

using namespace ge2::test;

namespace {

// Checks the status and that the message contains every fragment.
void expect_error(ge2_status_t got, ge2_status_t want,
                  std::initializer_list<const char*> fragments) {
  const std::string message = ge2_last_error();
  INFO("message: " << message);
  CHECK_MESSAGE(got == want, ge2_status_string(got) << " instead of " << ge2_status_string(want));
  for (const char* fragment : fragments)
    CHECK_MESSAGE(message.find(fragment) != std::string::npos, "missing '" << fragment << "'");
}

ge2_tensor_desc_t matrix(ge2_dtype_t dtype, std::int64_t rows, std::int64_t cols) {
  ge2_tensor_desc_t d{};
  d.dtype = dtype;
  d.rank = 2;
  d.shape[0] = rows;
  d.shape[1] = cols;
  return d;
}

}  // namespace

TEST_CASE("errors: version mismatch") {
  ge2_context_t* context = nullptr;
  expect_error(ge2_context_create(GE2_API_VERSION + 1, nullptr, &context),
               GE2_ERROR_VERSION_MISMATCH, {"ge2_context_create", "'api_version' = 3"});
  expect_error(ge2_context_create(1, nullptr, &context), GE2_ERROR_VERSION_MISMATCH,
               {"'api_version' = 1"});
  CHECK(context == nullptr);
  CHECK(ge2_get_api_version() == GE2_API_VERSION);
}

TEST_CASE("errors: context options") {
  ge2_context_t* context = nullptr;
  expect_error(ge2_context_create(GE2_API_VERSION, nullptr, nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'out' is NULL"});
  ge2_context_options_t options;
  REQUIRE(ge2_context_options_init(&options) == GE2_OK);
  options.device = static_cast<ge2_device_kind_t>(7);
  expect_error(ge2_context_create(GE2_API_VERSION, &options, &context), GE2_ERROR_INVALID_ARGUMENT,
               {"'options->device' = 7"});
  ge2_context_options_init(&options);
  options.tune_mode = static_cast<ge2_tune_mode_t>(-1);
  expect_error(ge2_context_create(GE2_API_VERSION, &options, &context), GE2_ERROR_INVALID_ARGUMENT,
               {"'options->tune_mode' = -1"});
  ge2_context_options_init(&options);
  options.struct_size = 4;
  expect_error(ge2_context_create(GE2_API_VERSION, &options, &context), GE2_ERROR_INVALID_ARGUMENT,
               {"'options'", "struct_size = 4"});
  ge2_context_options_init(&options);
  options.device_ordinal = -2;
  expect_error(ge2_context_create(GE2_API_VERSION, &options, &context), GE2_ERROR_INVALID_ARGUMENT,
               {"'options->device_ordinal' = -2"});
  expect_error((ge2_context_options_init)(nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'options' is NULL"});
}

TEST_CASE("errors: no device") {
#ifndef GE2_TEST_EXPECT_DEVICE
  ge2_context_options_t options;
  ge2_context_options_init(&options);
  options.device = GE2_DEVICE_CUDA;
  ge2_context_t* context = nullptr;
  const ge2_status_t status = ge2_context_create(GE2_API_VERSION, &options, &context);
  if (status == GE2_OK) {
    MESSAGE("a CUDA device is present; the no-device path is not reachable here");
    ge2_context_destroy(context);
  } else {
    expect_error(status, GE2_ERROR_NO_DEVICE, {"ge2_context_create"});
  }
#endif
}

TEST_CASE("errors: tensor descriptions") {
  auto graph = make_graph();
  ge2_value_t v;
  ge2_tensor_desc_t d = matrix(GE2_DTYPE_F16, 4, 8);
  expect_error(ge2_graph_add_input(nullptr, "x", &d, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"'graph' is NULL"});
  expect_error(ge2_graph_add_input(graph.get(), nullptr, &d, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"'name' is NULL"});
  expect_error(ge2_graph_add_input(graph.get(), "", &d, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"'name'"});
  expect_error(ge2_graph_add_input(graph.get(), "x", nullptr, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"'desc' is NULL"});
  expect_error(ge2_graph_add_input(graph.get(), "x", &d, nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'out' is NULL"});

  auto bad = d;
  bad.dtype = static_cast<ge2_dtype_t>(9);
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"'desc'", "dtype 9"});
  bad = d;
  bad.rank = 4;
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"'desc'", "rank 4"});
  bad = d;
  bad.shape[1] = 0;
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"shape[1] = 0"});
  bad.shape[1] = -3;
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"shape[1] = -3"});
  bad = d;
  bad.shape[0] = std::int64_t{1} << 40;
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"shape[0] = 1099511627776"});
  // Fuzzer regression: three dimensions whose product overflows int64 are
  // rejected before multiplying (the check used to come after).
  ge2_tensor_desc_t huge{GE2_DTYPE_F16,
                         3,
                         {std::int64_t{1} << 20, std::int64_t{1} << 20, std::int64_t{1} << 31},
                         {0, 0, 0}};
  expect_error(ge2_graph_add_input(graph.get(), "x", &huge, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"more than"});
  bad = matrix(GE2_DTYPE_F32, std::int64_t{1} << 30, std::int64_t{1} << 30);
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"more than"});
  bad = d;
  bad.strides[0] = 4;  // rows of 8 elements 4 apart: overlap
  bad.strides[1] = 1;
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"strides overlap"});
  bad.strides[0] = -8;
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"strides[0] = -8"});
  bad.strides[0] = std::int64_t{1} << 39;  // fits alone, but 4 rows span beyond the limit
  bad.shape[0] = 4096;
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"spans more than"});
  bad = d;
  bad.strides[0] = 0;
  bad.strides[1] = 1;
  expect_error(ge2_graph_add_input(graph.get(), "x", &bad, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"strides[0] = 0"});

  REQUIRE(ge2_graph_add_input(graph.get(), "x", &d, &v) == GE2_OK);
  expect_error(ge2_graph_add_input(graph.get(), "x", &d, &v), GE2_ERROR_INVALID_ARGUMENT,
               {"'name' = 'x' is already"});
  std::string long_name(300, 'n');
  expect_error(ge2_graph_add_input(graph.get(), long_name.c_str(), &d, &v),
               GE2_ERROR_INVALID_ARGUMENT, {"'name' must have"});
}

TEST_CASE("errors: graph ops") {
  auto graph = make_graph();
  ge2_value_t a, b, b_bf16, bias, wrong_bias, out;
  const auto da = matrix(GE2_DTYPE_F16, 4, 8), db = matrix(GE2_DTYPE_F16, 6, 5),
             dbf = matrix(GE2_DTYPE_BF16, 8, 5);
  ge2_tensor_desc_t dbias{};
  dbias.dtype = GE2_DTYPE_F16;
  dbias.rank = 1;
  dbias.shape[0] = 5;
  auto dwrong = dbias;
  dwrong.shape[0] = 6;
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &da, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "b", &db, &b) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "b_bf16", &dbf, &b_bf16) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "bias", &dbias, &bias) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "wrong_bias", &dwrong, &wrong_bias) == GE2_OK);

  expect_error(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &out),
               GE2_ERROR_SHAPE_MISMATCH, {"ge2_graph_add_gemm", "'b'", "K=6", "K=8"});
  expect_error(ge2_graph_add_gemm(graph.get(), a, b_bf16, GE2_NO_VALUE, nullptr, &out),
               GE2_ERROR_SHAPE_MISMATCH, {"'b'", "bf16", "f16"});
  expect_error(ge2_graph_add_gemm(graph.get(), a, 99, GE2_NO_VALUE, nullptr, &out),
               GE2_ERROR_INVALID_ARGUMENT, {"'b' = 99"});
  expect_error(ge2_graph_add_gemm(graph.get(), -5, b, GE2_NO_VALUE, nullptr, &out),
               GE2_ERROR_INVALID_ARGUMENT, {"'a' = -5"});
  ge2_gemm_attrs_t attrs;
  ge2_gemm_attrs_init(&attrs);
  attrs.trans_b = 1;
  attrs.trans_a = 2;
  expect_error(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, &attrs, &out),
               GE2_ERROR_INVALID_ARGUMENT, {"'attrs->trans_a' = 2"});
  ge2_gemm_attrs_init(&attrs);
  attrs.beta = 1.0f;
  ge2_value_t b_ok;
  const auto dbok = matrix(GE2_DTYPE_F16, 8, 5);
  REQUIRE(ge2_graph_add_input(graph.get(), "b_ok", &dbok, &b_ok) == GE2_OK);
  expect_error(ge2_graph_add_gemm(graph.get(), a, b_ok, GE2_NO_VALUE, &attrs, &out),
               GE2_ERROR_INVALID_ARGUMENT, {"beta = 1", "C operand"});
  ge2_gemm_attrs_init(&attrs);
  attrs.alpha = std::numeric_limits<float>::quiet_NaN();
  expect_error(ge2_graph_add_gemm(graph.get(), a, b_ok, GE2_NO_VALUE, &attrs, &out),
               GE2_ERROR_INVALID_ARGUMENT, {"'attrs->alpha'", "not finite"});
  ge2_gemm_attrs_init(&attrs);
  attrs.struct_size = 3;
  expect_error(ge2_graph_add_gemm(graph.get(), a, b_ok, GE2_NO_VALUE, &attrs, &out),
               GE2_ERROR_INVALID_ARGUMENT, {"'attrs'", "struct_size = 3"});

  expect_error(
      ge2_graph_add_gemm_bias_act(graph.get(), a, b_ok, wrong_bias, nullptr, GE2_ACT_RELU, &out),
      GE2_ERROR_SHAPE_MISMATCH, {"'bias'", "[6] f16", "[5]"});
  expect_error(ge2_graph_add_gemm_bias_act(graph.get(), a, b_ok, bias, nullptr,
                                           static_cast<ge2_activation_t>(11), &out),
               GE2_ERROR_INVALID_ARGUMENT, {"'act' = 11"});
  expect_error(ge2_graph_add_bias(graph.get(), a, bias, &out), GE2_ERROR_SHAPE_MISMATCH,
               {"'bias'", "[8]"});
  expect_error(ge2_graph_add_activation(graph.get(), bias, GE2_ACT_RELU, &out),
               GE2_ERROR_SHAPE_MISMATCH, {"'x'", "rank 1"});

  REQUIRE(ge2_graph_add_gemm_bias_act(graph.get(), a, b_ok, bias, nullptr, GE2_ACT_RELU, &out) ==
          GE2_OK);
  expect_error(ge2_graph_mark_output(graph.get(), a, "y", nullptr), GE2_ERROR_UNSUPPORTED,
               {"'value'", "graph input 'a'"});
  expect_error(ge2_graph_mark_output(graph.get(), out, "a", nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'name' = 'a'"});
  auto layout = matrix(GE2_DTYPE_F16, 4, 6);
  expect_error(ge2_graph_mark_output(graph.get(), out, "y", &layout), GE2_ERROR_SHAPE_MISMATCH,
               {"'layout'", "[4, 6]"});
  REQUIRE(ge2_graph_mark_output(graph.get(), out, "y", nullptr) == GE2_OK);
  expect_error(ge2_graph_mark_output(graph.get(), out, "y2", nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"already the output 'y'"});
}

TEST_CASE("errors: compile and execute") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  ge2_plan_t* plan = nullptr;
  expect_error(ge2_plan_compile(context.get(), graph.get(), nullptr, &plan),
               GE2_ERROR_INVALID_ARGUMENT, {"no outputs"});
  expect_error(ge2_plan_compile(nullptr, graph.get(), nullptr, &plan), GE2_ERROR_INVALID_ARGUMENT,
               {"'context' is NULL"});

  ge2_value_t a, b, out;
  const auto da = matrix(GE2_DTYPE_F32, 3, 4), db = matrix(GE2_DTYPE_F32, 4, 2);
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &da, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "b", &db, &b) == GE2_OK);
  REQUIRE(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &out) == GE2_OK);
  REQUIRE(ge2_graph_mark_output(graph.get(), out, "d", nullptr) == GE2_OK);

  ge2_compile_options_t options;
  ge2_compile_options_init(&options);
  options.force_kernel = "lt_f16";
  expect_error(ge2_plan_compile(context.get(), graph.get(), &options, &plan), GE2_ERROR_UNSUPPORTED,
               {"'lt_f16' was forced", "does not offer it (it offers cpu_fp8_ref, cpu_ref)"});
  options.force_kernel = "fastest_please";
  expect_error(ge2_plan_compile(context.get(), graph.get(), &options, &plan),
               GE2_ERROR_INVALID_ARGUMENT, {"'options->force_kernel' = 'fastest_please'"});
  options.force_kernel = nullptr;
  REQUIRE(ge2_plan_compile(context.get(), graph.get(), &options, &plan) == GE2_OK);
  PlanPtr owned(plan);

  float ha[12], hb[8], hd[6];
  for (int i = 0; i < 12; ++i) ha[i] = 0.25f * static_cast<float>(i) - 1.0f;
  for (int i = 0; i < 8; ++i) hb[i] = 0.5f - 0.125f * static_cast<float>(i);
  ge2_binding_t bindings[] = {{"a", ha}, {"b", hb}, {"d", hd}};
  expect_error(ge2_plan_execute(plan, bindings, 2, nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"output 'd' is not bound"});
  ge2_binding_t twice[] = {{"a", ha}, {"a", ha}, {"d", hd}};
  expect_error(ge2_plan_execute(plan, twice, 3, nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'a' is bound twice"});
  ge2_binding_t unknown[] = {{"a", ha}, {"b", hb}, {"x", hd}};
  expect_error(ge2_plan_execute(plan, unknown, 3, nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'bindings[2].name' = 'x'"});
  ge2_binding_t null_data[] = {{"a", ha}, {"b", nullptr}, {"d", hd}};
  expect_error(ge2_plan_execute(plan, null_data, 3, nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'bindings[1].data'", "'b'"});
  ge2_binding_t null_name[] = {{nullptr, ha}};
  expect_error(ge2_plan_execute(plan, null_name, 1, nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'bindings[0].name' is NULL"});
  expect_error(ge2_plan_execute(plan, nullptr, 3, nullptr), GE2_ERROR_INVALID_ARGUMENT,
               {"'bindings' is NULL"});
  int fake_stream = 0;
  expect_error(ge2_plan_execute(plan, bindings, 3, &fake_stream), GE2_ERROR_INVALID_ARGUMENT,
               {"'stream'"});
  REQUIRE(ge2_plan_execute(plan, bindings, 3, nullptr) == GE2_OK);
  // The plan still works after every failure above: check one value exactly.
  float expected = 0;
  for (int kk = 0; kk < 4; ++kk) expected += ha[1 * 4 + kk] * hb[kk * 2 + 1];
  CHECK(hd[1 * 2 + 1] == doctest::Approx(expected).epsilon(1e-6));

  ge2_io_info_t info;
  expect_error(ge2_plan_io_info(plan, 3, &info), GE2_ERROR_INVALID_ARGUMENT, {"'index' = 3"});
}

TEST_CASE("errors: out of memory is a status, not a crash") {
  auto context = make_context(GE2_DEVICE_CPU);
  ge2_plan_t* plan = nullptr;
  // The [2^20, 2^19] f32 intermediate needs 2 TiB of host memory.
  expect_error(compile_with_huge_intermediate(context.get(), std::int64_t{1} << 19, &plan),
               GE2_ERROR_OUT_OF_MEMORY, {"ge2_plan_compile", "memory"});
  CHECK(plan == nullptr);
}

TEST_CASE("errors: one-shot parameter block") {
  auto context = make_context(GE2_DEVICE_CPU);
  ge2_gemm_params_t p;
  REQUIRE(ge2_gemm_params_init(&p) == GE2_OK);
  float buffer[64] = {};
  expect_error(ge2_gemm_bias_act(context.get(), &p, buffer, buffer, nullptr, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'params->m' = 0"});
  p.m = 4;
  p.n = 4;
  p.k = -4;
  expect_error(ge2_gemm_bias_act(context.get(), &p, buffer, buffer, nullptr, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'params->k' = -4"});
  p.k = 4;
  p.lda = 2;
  expect_error(ge2_gemm_bias_act(context.get(), &p, buffer, buffer, nullptr, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'params->lda' = 2", "smaller"});
  p.lda = 0;
  p.batch = 2;
  p.stride_d = 5;
  expect_error(ge2_gemm_bias_act(context.get(), &p, buffer, buffer, nullptr, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'params->stride_d' = 5", "overlap"});
  p.stride_d = 0;
  p.activation = static_cast<ge2_activation_t>(GE2_ACT_QUICK_GELU + 1);
  expect_error(ge2_gemm_bias_act(context.get(), &p, buffer, buffer, nullptr, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'params->activation' = 6"});
  p.activation = GE2_ACT_RELU;
  p.dtype = static_cast<ge2_dtype_t>(0);
  expect_error(ge2_gemm_bias_act(context.get(), &p, buffer, buffer, nullptr, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'params->dtype' = 0"});
  p.dtype = GE2_DTYPE_F32;
  p.has_bias = 1;
  expect_error(ge2_gemm_bias_act(context.get(), &p, buffer, buffer, nullptr, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'bias' is NULL", "has_bias = 1"});
  expect_error(ge2_gemm_bias_act(context.get(), &p, nullptr, buffer, buffer, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'a' is NULL"});
  p.has_bias = 0;
  p.trans_b = -1;
  expect_error(ge2_gemm_bias_act(context.get(), &p, buffer, buffer, nullptr, buffer, nullptr),
               GE2_ERROR_INVALID_ARGUMENT, {"'params->trans_b' = -1"});
}

TEST_CASE("status strings cover every code") {
  for (int s = GE2_OK; s <= GE2_ERROR_INTERNAL; ++s) {
    const std::string name = ge2_status_string(static_cast<ge2_status_t>(s));
    CHECK(name.rfind("GE2_", 0) == 0);
    CHECK(name != "GE2_UNKNOWN_STATUS");
  }
  CHECK(std::string(ge2_status_string(static_cast<ge2_status_t>(42))) == "GE2_UNKNOWN_STATUS");
  CHECK(std::string(ge2_status_string(GE2_ERROR_TUNEDB)) == "GE2_ERROR_TUNEDB");
  CHECK(std::string(ge2_status_string(GE2_ERROR_INTERNAL)) == "GE2_ERROR_INTERNAL");
}
