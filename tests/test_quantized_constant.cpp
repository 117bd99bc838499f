// Constants given in e4m3 with their scales (ge2_graph_add_quantized_constant) on
// the CPU backend: the graph's value is e4m3 * scale in the value's dtype, every
// argument fault is refused naming it, and f8_e4m3 is a storage type only.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "core/dtype.hpp"
#include "support/quantized_weight.hpp"

using namespace ge2::test;

namespace {

// Compiles `graph` on `context`, runs it on the layer's x and returns y with the plan text.
std::pair<HostTensor, nlohmann::json> run_layer(ge2_context_t* context, const ge2_graph_t* graph,
                                                const QuantizedLayer& layer,
                                                const ge2_compile_options_t* options = nullptr) {
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph, options, &raw));
  PlanPtr plan(raw);
  const char* text = nullptr;
  GE2_CHECK(ge2_plan_describe(plan.get(), &text));
  const std::int64_t n = layer.bias.shape[0];
  HostTensor x = layer.x, y = make_tensor(layer.dtype, {layer.m, n});
  poison(y);
  const ge2_binding_t bindings[] = {{"x", x.data()}, {"y", y.data()}};
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings, 2, nullptr));
  return {y, nlohmann::json::parse(text)};
}

// The value the constant `w` of `graph` (rows x cols of `dtype`) holds, read back through
// y = I w on the CPU backend.
HostTensor stored_value(ge2_graph_t* graph, ge2_value_t w, ge2_dtype_t dtype, std::int64_t rows,
                        std::int64_t cols) {
  auto context = make_context(GE2_DEVICE_CPU);
  const ge2_tensor_desc_t dx{dtype, 2, {rows, rows}, {}};
  ge2_value_t vx, vy;
  GE2_CHECK(ge2_graph_add_input(graph, "x", &dx, &vx));
  GE2_CHECK(ge2_graph_add_gemm(graph, vx, w, GE2_NO_VALUE, nullptr, &vy));
  GE2_CHECK(ge2_graph_mark_output(graph, vy, "y", nullptr));
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context.get(), graph, nullptr, &raw));
  PlanPtr plan(raw);
  HostTensor x = make_tensor(dtype, {rows, rows}), y = make_tensor(dtype, {rows, cols});
  for (std::int64_t i = 0; i < rows * rows; ++i) x.set(i, i % (rows + 1) == 0 ? 1.0 : 0.0);
  poison(y);
  const ge2_binding_t bindings[] = {{"x", x.data()}, {"y", y.data()}};
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings, 2, nullptr));
  return y;
}

// A call refused as GE2_ERROR_INVALID_ARGUMENT with `fragment` in its message.
void expect_refused(ge2_status_t status, const char* fragment) {
  expect_refusal(status, GE2_ERROR_INVALID_ARGUMENT, fragment);
}

}  // namespace

TEST_CASE("quantized constant: the graph reads e4m3 * scale, every dtype, layout and scale axis") {
  auto context = make_context(GE2_DEVICE_CPU);
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16, GE2_DTYPE_F32})
    for (bool trans_b : {true, false})
      for (int axis : {-1, 0, 1}) {
        CAPTURE(dtype);
        CAPTURE(trans_b);
        CAPTURE(axis);
        const QuantizedLayer layer = make_quantized_layer(dtype, 5, 24, 40, trans_b, axis);
        GraphPtr graph = quantized_layer_graph(layer);
        ge2_tensor_desc_t desc{};
        GE2_CHECK(ge2_graph_get_desc(graph.get(), 1, &desc));
        CHECK(desc.dtype == dtype);
        CHECK(desc.shape[0] == layer.weight.rows);
        const auto [y, plan] = run_layer(context.get(), graph.get(), layer);
        const double error = relative_error(y, layer.reference(layer.m));
        CHECK(error <= tolerance(dtype));
        bool described = false;
        for (const auto& constant : plan.at("constants"))
          if (constant.at("name") == "w")
            described = constant.at("given_as").get<std::string>().find("f8_e4m3") == 0;
        CHECK(described);
      }
}

TEST_CASE("quantized constant: the value is rounded once into its dtype, saturation codes kept") {
  // One code of each kind: zero, the smallest subnormal, 1, the largest finite (448),
  // negatives; the value is exactly what the dtype rounds e4m3 * scale to.
  const std::uint8_t codes[] = {0x00, 0x01, 0x38, 0x7e, 0xb8, 0xfe, 0x80, 0x3f};
  const float scales[] = {0.1f, 3.0f};  // per row
  GraphPtr graph = make_graph();
  const ge2_tensor_desc_t dw{GE2_DTYPE_F16, 2, {2, 4}, {}};
  ge2_value_t vw;
  GE2_CHECK(ge2_graph_add_quantized_constant(graph.get(), "w", &dw, GE2_DTYPE_F8_E4M3, codes,
                                             scales, 2, 0, &vw));
  const HostTensor y = stored_value(graph.get(), vw, GE2_DTYPE_F16, 2, 4);
  for (int i = 0; i < 8; ++i) {
    CAPTURE(i);
    const float want = ge2::half_bits_to_float(
        ge2::float_to_half_bits(ge2::e4m3_bits_to_float(codes[i]) * scales[i / 4]));
    CHECK(y.get(i) == want);
  }
  CHECK(y.get(3) == doctest::Approx(448.0 * 0.1).epsilon(1e-3));
  CHECK(y.get(5) == doctest::Approx(-448.0 * 3.0).epsilon(1e-3));
}

TEST_CASE("quantized constant: every argument fault is refused naming the argument and value") {
  GraphPtr graph = make_graph();
  const std::uint8_t data[6] = {0x38, 0x40, 0x30, 0xb8, 0x00, 0x01};
  const float scales[3] = {1.0f, 2.0f, 0.5f};
  const ge2_tensor_desc_t d{GE2_DTYPE_F16, 2, {2, 3}, {}};
  ge2_value_t out = 42;
  auto add = [&](const char* name, const ge2_tensor_desc_t* desc, int storage, const void* bytes,
                 const float* s, std::int64_t count, int axis, ge2_value_t* o) {
    return ge2_graph_add_quantized_constant(
        graph.get(), name, desc, static_cast<ge2_dtype_t>(storage), bytes, s, count, axis, o);
  };
  expect_refused(add("w", &d, GE2_DTYPE_F16, data, scales, 1, -1, &out),
                 "argument 'storage_dtype' = 1 is not a quantized storage type");
  expect_refused(add("w", &d, 77, data, scales, 1, -1, &out), "argument 'storage_dtype' = 77");
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, data, scales, 1, 2, &out),
                 "argument 'scale_axis' = 2");
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, data, scales, 3, -1, &out),
                 "argument 'scale_count' = 3 must be 1 for scale_axis -1");
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, data, scales, 3, 0, &out),
                 "argument 'scale_count' = 3 must be 2 for scale_axis 0");
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, data, scales, -1, 1, &out),
                 "argument 'scale_count' = -1 must be 3");
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, nullptr, scales, 1, -1, &out), "'data'");
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, data, nullptr, 1, -1, &out), "'scales'");
  expect_refused(add("w", nullptr, GE2_DTYPE_F8_E4M3, data, scales, 1, -1, &out), "'desc'");
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, data, scales, 1, -1, nullptr), "'out'");
  expect_refused(add(nullptr, &d, GE2_DTYPE_F8_E4M3, data, scales, 1, -1, &out), "'name'");
  const float nan_scale[3] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, data, nan_scale, 3, 1, &out),
                 "scales[1] = nan is not finite");
  const float inf_scale = std::numeric_limits<float>::infinity();
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, data, &inf_scale, 1, -1, &out),
                 "scales[0] = inf is not finite");
  const std::uint8_t nan_code[6] = {0x38, 0x40, 0x30, 0xb8, 0xff, 0x01};
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, nan_code, scales, 1, -1, &out),
                 "element [1, 1] is an e4m3 NaN code (0xff)");
  // 448 * 200 = 89600 is past f16's 65504; bf16 and f32 hold it.
  const std::uint8_t big[6] = {0x38, 0x7e, 0x30, 0xb8, 0x00, 0x01};
  const float large = 200.0f;
  expect_refused(add("w", &d, GE2_DTYPE_F8_E4M3, big, &large, 1, -1, &out),
                 "element [0, 1] = 448 * scale 200 overflows f16");
  const ge2_tensor_desc_t d_bf16{GE2_DTYPE_BF16, 2, {2, 3}, {}};
  ge2_value_t ok = GE2_NO_VALUE;
  GE2_CHECK(add("big_bf16", &d_bf16, GE2_DTYPE_F8_E4M3, big, &large, 1, -1, &ok));
  CHECK(ok >= 0);
  const ge2_tensor_desc_t rank3{GE2_DTYPE_F16, 3, {1, 2, 3}, {}};
  expect_refused(add("w", &rank3, GE2_DTYPE_F8_E4M3, data, scales, 1, -1, &out),
                 "argument 'desc' has rank 3");
  const ge2_tensor_desc_t strided{GE2_DTYPE_F16, 2, {2, 3}, {4, 1}};
  expect_refused(add("w", &strided, GE2_DTYPE_F8_E4M3, data, scales, 1, -1, &out),
                 "argument 'desc' has strides [4, 1]");
  const ge2_tensor_desc_t fp8_value{GE2_DTYPE_F8_E4M3, 2, {2, 3}, {}};
  expect_refused(add("w", &fp8_value, GE2_DTYPE_F8_E4M3, data, scales, 1, -1, &out),
                 "4 (f8_e4m3) is a storage type only");
  expect_refused(add("big_bf16", &d, GE2_DTYPE_F8_E4M3, data, scales, 1, -1, &out),
                 "'big_bf16' is already a constant");
  CHECK(out == 42);  // no refusal wrote it
  // The graph is intact after the refusals: the one constant added is still its only value.
  ge2_tensor_desc_t desc{};
  GE2_CHECK(ge2_graph_get_desc(graph.get(), ok, &desc));
  CHECK(desc.dtype == GE2_DTYPE_BF16);
  CHECK(ge2_graph_get_desc(graph.get(), ok + 1, &desc) == GE2_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("quantized constant: f8_e4m3 is refused as the dtype of any computed value") {
  GraphPtr graph = make_graph();
  const ge2_tensor_desc_t d{GE2_DTYPE_F8_E4M3, 2, {2, 3}, {}};
  ge2_value_t out;
  expect_refused(ge2_graph_add_input(graph.get(), "x", &d, &out),
                 "dtype 4 (f8_e4m3) is a storage type only");
  const std::uint8_t data[6] = {};
  expect_refused(ge2_graph_add_constant(graph.get(), "c", &d, data, &out),
                 "storage type only: quantized constants take it");
  auto context = make_context(GE2_DEVICE_CPU);
  ge2_gemm_params_t params = gemm_params(GE2_DTYPE_F8_E4M3, 2, 2, 2);
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, d_out[4] = {};
  expect_refused(ge2_gemm_bias_act(context.get(), &params, a, b, nullptr, d_out, nullptr),
                 "argument 'params->dtype' = 4 (f8_e4m3) is a storage type only");
}

TEST_CASE("block quantized constant: e4m3 * the block's scale, partial and oversized blocks") {
  // Blocks as checkpoints give them (128 x 128, here scaled down to 16 x 32 so the
  // matrix has partial blocks on both edges), one per row or column of blocks, and a
  // block larger than the matrix (one scale); both layouts, every dtype.
  auto context = make_context(GE2_DEVICE_CPU);
  struct Blocks {
    std::int64_t n, k;
  };
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16, GE2_DTYPE_F32})
    for (bool trans_b : {true, false})
      for (const Blocks blocks : {Blocks{16, 32}, Blocks{1, 64}, Blocks{40, 1}, Blocks{512, 512}}) {
        CAPTURE(dtype);
        CAPTURE(trans_b);
        CAPTURE(blocks.n);
        CAPTURE(blocks.k);
        const QuantizedLayer layer =
            make_block_quantized_layer(dtype, 5, 40, 72, trans_b, blocks.n, blocks.k);
        GraphPtr graph = quantized_layer_graph(layer);
        const auto [y, plan] = run_layer(context.get(), graph.get(), layer);
        CHECK(relative_error(y, layer.reference(layer.m)) <= tolerance(dtype));
        std::string given_as;
        for (const auto& constant : plan.at("constants"))
          if (constant.at("name") == "w") given_as = constant.at("given_as");
        CHECK(given_as.find("f8_e4m3 with one scale") == 0);
      }
}

TEST_CASE(
    "block quantized constant: allow_fp8 quantizes x per row and 128 k beside 128x128 blocks") {
  // DeepSeek-V3's recipe, which cuBLASLt's block-scale mode runs on Hopper
  // (lt_fp8_e4m3): x gets a scale per row and 128 columns, the weight keeps a scale
  // per 128 x 128 block. cpu_fp8_ref emulates it (the weight's value quantized again
  // per block). One group of x's first row and one block of the weight are 300 times
  // the rest: per row or per channel they would push their neighbours into e4m3's
  // subnormals. N ends inside a block.
  auto context = make_context(GE2_DEVICE_CPU);
  ge2_compile_options_t options;
  GE2_CHECK(ge2_compile_options_init(&options));
  options.allow_fp8 = 1;
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16})
    for (bool trans_b : {true, false}) {
      CAPTURE(dtype);
      CAPTURE(trans_b);
      QuantizedLayer layer = make_block_quantized_layer(dtype, 12, 296, 1024, trans_b, 128, 128);
      // Apart along K, so that no product holds both (f16's range).
      layer.weight.scales[0] *= 300.0f;
      for (std::int64_t j = 896; j < 1024; ++j) layer.x.set(j, layer.x.get(j) * 300.0);
      GraphPtr graph = quantized_layer_graph(layer);
      const auto [y, plan] = run_layer(context.get(), graph.get(), layer, &options);
      std::string kernel;
      for (const auto& step : plan.at("steps"))
        if (step.contains("selection")) kernel = step.at("kernel").at("name");
      CHECK(kernel == "cpu_fp8_ref");
      const auto gate = plan.at("fp8").at("layers").at(0);
      CHECK(gate.at("decision") == "kept");
      CHECK(gate.at("scales").get<std::string>().find(
                "one scale per 128x128 block of the weight as stored); per row and 128 columns "
                "of the activation") != std::string::npos);
      CHECK(relative_error(y, layer.block_fp8_reference(layer.m, true)) <= tolerance(dtype));
      CHECK(relative_error(y, layer.reference(layer.m)) <= 0.06);
    }
  // Blocks of another size, M not a multiple of 4, K not one of 512: refused, naming why,
  // and the 16-bit reference loop reads the value.
  struct Refused {
    std::int64_t m, k, block;
    const char* reason;
  };
  for (const Refused r :
       {Refused{12, 1024, 64, "this row reads blocks of 128x128 only"},
        Refused{9, 1024, 128, "takes M a multiple of 4 (A's scales per 128 k), M = 9"},
        Refused{12, 400, 128, "takes K a multiple of 512 (the weight's scale grid), K = 400"}}) {
    CAPTURE(r.reason);
    const QuantizedLayer other =
        make_block_quantized_layer(GE2_DTYPE_F16, r.m, 296, r.k, true, r.block, r.block);
    GraphPtr graph = quantized_layer_graph(other);
    const auto [y, plan] = run_layer(context.get(), graph.get(), other, &options);
    CHECK(plan.dump().find(r.reason) != std::string::npos);
    CHECK(relative_error(y, other.reference(other.m)) <= tolerance(GE2_DTYPE_F16));
  }
}

TEST_CASE("block quantized constant: each element is its code times its own block's scale") {
  // A 3 x 5 matrix in blocks of 2 x 2: a 2 x 3 grid whose last row and column are
  // partial. y = I w returns the stored value, which must be exactly the dtype's
  // rounding of code * scale of the element's block.
  const std::uint8_t codes[15] = {0x38, 0x40, 0x30, 0xb8, 0x7e, 0x01, 0x00, 0x3f,
                                  0x44, 0xc0, 0x39, 0x3a, 0xfe, 0x80, 0x48};
  const float scales[6] = {0.5f, 2.0f, 0.125f, 3.0f, 0.01f, 7.0f};
  GraphPtr graph = make_graph();
  const ge2_tensor_desc_t dw{GE2_DTYPE_F32, 2, {3, 5}, {}};
  ge2_value_t vw;
  GE2_CHECK(ge2_graph_add_block_quantized_constant(graph.get(), "w", &dw, GE2_DTYPE_F8_E4M3, codes,
                                                   scales, 6, 2, 2, &vw));
  const HostTensor y = stored_value(graph.get(), vw, GE2_DTYPE_F32, 3, 5);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      const float scale = scales[(i / 2) * 3 + j / 2];
      CHECK(y.get(i * 5 + j) == ge2::e4m3_bits_to_float(codes[i * 5 + j]) * scale);
    }
}

TEST_CASE("block quantized constant: faults are refused naming the argument and value") {
  GraphPtr graph = make_graph();
  const std::uint8_t data[6] = {0x38, 0x40, 0x30, 0xb8, 0x00, 0x01};
  const float scales[4] = {1.0f, 2.0f, 0.5f, 4.0f};
  const ge2_tensor_desc_t d{GE2_DTYPE_F16, 2, {2, 3}, {}};
  ge2_value_t out = 42;
  auto add = [&](const float* s, std::int64_t count, std::int64_t block_rows,
                 std::int64_t block_cols) {
    return ge2_graph_add_block_quantized_constant(graph.get(), "w", &d, GE2_DTYPE_F8_E4M3, data, s,
                                                  count, block_rows, block_cols, &out);
  };
  expect_refused(add(scales, 1, 0, 2), "argument 'block_rows' = 0 must be at least 1");
  expect_refused(add(scales, 1, 2, -5), "argument 'block_cols' = -5 must be at least 1");
  expect_refused(add(scales, 4, 2, 2),
                 "argument 'scale_count' = 4 must be 2 (1 x 2 blocks of 2 x 2 in shape [2, 3])");
  expect_refused(add(scales, 1, 1, 1), "argument 'scale_count' = 1 must be 6");
  const float nan_scale[2] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  expect_refused(add(nan_scale, 2, 2, 2), "scales[1] = nan is not finite");
  expect_refused(add(nullptr, 2, 2, 2), "'scales'");
  expect_refused(ge2_graph_add_block_quantized_constant(graph.get(), "w", &d, GE2_DTYPE_BF16, data,
                                                        scales, 2, 2, 2, &out),
                 "argument 'storage_dtype' = 2 is not a quantized storage type");
  // 448 * 200 overflows f16 in the second block only.
  const std::uint8_t big[6] = {0x38, 0x40, 0x7e, 0xb8, 0x00, 0x01};
  const float large[2] = {1.0f, 200.0f};
  const ge2_status_t overflow = ge2_graph_add_block_quantized_constant(
      graph.get(), "w", &d, GE2_DTYPE_F8_E4M3, big, large, 2, 2, 2, &out);
  expect_refused(overflow, "element [0, 2] = 448 * scale 200 overflows f16");
  CHECK(out == 42);
  GE2_CHECK(add(scales, 2, 2, 2));
  CHECK(out == 0);
}
