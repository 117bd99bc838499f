#include "support/fp8_layer.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace ge2::test {
namespace {

// The 127 non-negative finite e4m3 values in code order (ascending): exponent
// field e, mantissa field m, bias 7; e = 0 is subnormal; code 0x7f is NaN.
std::array<double, 127> e4m3_values() {
  std::array<double, 127> values{};
  for (int code = 0; code < 127; ++code) {
    const int e = code >> 3, m = code & 7;
    values[static_cast<std::size_t>(code)] =
        e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  }
  return values;
}

}  // namespace

double round_to_e4m3_oracle(double value) {
  static const std::array<double, 127> values = e4m3_values();
  if (std::isnan(value)) return value;
  const double magnitude = std::min(std::fabs(value), 448.0);
  const auto upper = std::lower_bound(values.begin(), values.end(), magnitude);
  double rounded = *upper;
  if (upper != values.begin() && *upper != magnitude) {
    const auto lower = upper - 1;
    const double below = magnitude - *lower, above = *upper - magnitude;
    // A tie goes to the even code (mantissa field's last bit 0).
    const bool lower_even = ((lower - values.begin()) & 1) == 0;
    rounded = below < above || (below == above && lower_even) ? *lower : *upper;
  }
  return std::signbit(value) ? -rounded : rounded;
}

std::vector<double> round_blocks_to_e4m3(std::vector<double>& values, std::int64_t rows,
                                         std::int64_t cols, std::int64_t block_rows,
                                         std::int64_t block_cols, bool multiply_back) {
  std::vector<double> scales;
  for (std::int64_t i0 = 0; i0 < rows; i0 += block_rows)
    for (std::int64_t j0 = 0; j0 < cols; j0 += block_cols) {
      const std::int64_t i1 = std::min(rows, i0 + block_rows), j1 = std::min(cols, j0 + block_cols);
      float amax = 0.0f;
      for (std::int64_t i = i0; i < i1; ++i)
        for (std::int64_t j = j0; j < j1; ++j)
          amax = std::max(amax, static_cast<float>(std::fabs(values[i * cols + j])));
      const float multiplier = amax == 0.0f ? 1.0f : 448.0f / amax;
      const double scale = amax == 0.0f ? 1.0 : static_cast<double>(amax) / 448.0;
      for (std::int64_t i = i0; i < i1; ++i)
        for (std::int64_t j = j0; j < j1; ++j) {
          double& v = values[i * cols + j];
          v = round_to_e4m3_oracle(static_cast<float>(v) * multiplier) *
              (multiply_back ? scale : 1.0);
        }
      scales.push_back(scale);
    }
  return scales;
}

std::string Fp8LayerCase::label() const {
  static const char* dtypes[] = {"?", "f16", "bf16", "f32"};
  return fmt::format(
      "fp8 layer {} {}x{}x{} act={} residual={} weight_input={} w={} dynamic={} "
      "allow_fp8={} max_error={} outlier={} replay={}",
      dtypes[dtype], m, n, k, static_cast<int>(act), residual, weight_input,
      nn_linear_weight ? "[n, k]" : "[k, n]", dynamic, allow_fp8, max_error, weight_outlier,
      graph_replay);
}

Fp8Layer::Fp8Layer(ge2_context_t* context, const Fp8LayerCase& layer_case)
    : c(layer_case),
      w(c.nn_linear_weight ? make_tensor(c.dtype, {c.n, c.k}) : make_tensor(c.dtype, {c.k, c.n})),
      bias(make_tensor(c.dtype, {c.n})) {
  INFO(c.label());
  const double bound = 1.0 / std::sqrt(static_cast<double>(c.k));
  fill_random(w, -bound, bound);
  if (c.weight_outlier != 1.0) w.set(w.offset(0, 0, 0), c.weight_outlier * bound);
  fill_random(bias, -0.5, 0.5);
  if (c.fill_constants) c.fill_constants(w, bias);
  GraphPtr graph = make_graph();
  const HostTensor x_shape = make_tensor(c.dtype, {c.m, c.k});
  const ge2_tensor_desc_t dx = x_shape.desc(), dw = w.desc(), dbias = bias.desc();
  ge2_value_t vx, vw, vbias, vy;
  GE2_CHECK(c.dynamic ? ge2_graph_add_dynamic_input(graph.get(), "x", &dx, &vx)
                      : ge2_graph_add_input(graph.get(), "x", &dx, &vx));
  GE2_CHECK(c.weight_input ? ge2_graph_add_input(graph.get(), "w", &dw, &vw)
                           : ge2_graph_add_constant(graph.get(), "w", &dw, w.data(), &vw));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "bias", &dbias, bias.data(), &vbias));
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_b = c.nn_linear_weight ? 1 : 0;
  GE2_CHECK(ge2_graph_add_gemm_bias_act(graph.get(), vx, vw, vbias, &attrs, c.act, &vy));
  if (c.residual) {
    const HostTensor r_shape = make_tensor(c.dtype, {c.m, c.n});
    const ge2_tensor_desc_t dr = r_shape.desc();
    ge2_value_t vr;
    GE2_CHECK(c.dynamic ? ge2_graph_add_dynamic_input(graph.get(), "r", &dr, &vr)
                        : ge2_graph_add_input(graph.get(), "r", &dr, &vr));
    GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_ADD, vy, vr, &vy));
  }
  GE2_CHECK(ge2_graph_mark_output(graph.get(), vy, "y", nullptr));
  ge2_compile_options_t options;
  GE2_CHECK(ge2_compile_options_init(&options));
  options.allow_fp8 = c.allow_fp8;
  options.fp8_max_error = c.max_error;
  options.force_kernel = c.force_kernel;
  options.graph_replay = c.graph_replay;
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph.get(), &options, &raw));
  plan.reset(raw);
  const char* text = nullptr;
  GE2_CHECK(ge2_plan_describe(plan.get(), &text));
  plan_json = text;
}

Fp8Layer::Errors Fp8Layer::run(Memory& memory, std::int64_t rows) {
  INFO(c.label(), " rows=", rows);
  HostTensor x = make_tensor(c.dtype, {rows, c.k}), r = make_tensor(c.dtype, {rows, c.n});
  HostTensor y = make_tensor(c.dtype, {rows, c.n});
  if (c.fill_x) {
    c.fill_x(x);
    c.fill_x(r);
  } else {
    fill_random(x);
    fill_random(r);
  }
  poison(y);
  void* y_data = memory.upload(y);
  void* x_data = nullptr;
  if (c.misaligned_x) {  // x's elements from element 1 of a wider copy
    HostTensor x_wide = make_tensor(c.dtype, {rows * c.k + 8});
    for (std::int64_t i = 0; i < rows * c.k; ++i) x_wide.set(i + 1, x.get(i));
    x_data = static_cast<unsigned char*>(memory.upload(x_wide)) + x.element_size();
  } else {
    x_data = memory.upload(x);
  }
  std::vector<ge2_binding_t> bindings{{"x", x_data}, {"y", y_data}};
  if (c.weight_input) bindings.push_back({"w", memory.upload(w)});
  if (c.residual) bindings.push_back({"r", memory.upload(r)});
  GE2_CHECK(c.dynamic
                ? ge2_plan_execute_dynamic(plan.get(), rows, bindings.data(), bindings.size(),
                                           memory.stream())
                : ge2_plan_execute(plan.get(), bindings.data(), bindings.size(), memory.stream()));
  memory.download(y_data, y);

  // fp64 layers on the original and on the e4m3-rounded operands: x per row, w
  // ([n, k]) per row, that is per output channel.
  std::vector<double> xs = dense_values(x, 0, false, rows, c.k),
                      ws = dense_values(w, 0, !c.nn_linear_weight, c.n, c.k);
  std::vector<double> xq = xs, wq = ws;
  const std::vector<double> x_scales = round_blocks_to_e4m3(xq, rows, c.k, 1, c.k, false),
                            w_scales = round_blocks_to_e4m3(wq, c.n, c.k, 1, c.k, false);
  const std::vector<double> ones(static_cast<std::size_t>(std::max(rows, c.n)), 1.0);
  auto layer = [&](const std::vector<double>& a, const std::vector<double>& b,
                   const std::vector<double>& a_scales, const std::vector<double>& b_scales) {
    std::vector<double> out(static_cast<std::size_t>(rows * c.n));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) {
        double sum = 0;
        for (std::int64_t kk = 0; kk < c.k; ++kk)
          sum +=
              a[static_cast<std::size_t>(i * c.k + kk)] * b[static_cast<std::size_t>(j * c.k + kk)];
        const double factor =
            a_scales[static_cast<std::size_t>(i)] * b_scales[static_cast<std::size_t>(j)];
        double value = activation_ref(c.act, sum * factor + bias.get(j));
        if (c.residual) value += r.get(r.offset(0, i, j));
        out[static_cast<std::size_t>(i * c.n + j)] = value;
      }
    return out;
  };
  return {relative_error(y, layer(xs, ws, ones, ones)),
          relative_error(y, layer(xq, wq, x_scales, w_scales)),
          relative_error(y, layer(xs, wq, ones, w_scales))};
}

}  // namespace ge2::test
