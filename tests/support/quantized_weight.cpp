#include "support/quantized_weight.hpp"

#include <doctest/doctest.h>

#include "core/dtype.hpp"

namespace ge2::test {

HostTensor QuantizedWeight::value() const {
  HostTensor t = make_tensor(GE2_DTYPE_F32, {rows, cols});
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      const double scale = scales[static_cast<std::size_t>(axis < 0 ? 0 : axis == 0 ? i : j)];
      t.set(i * cols + j,
            static_cast<double>(e4m3_bits_to_float(data[static_cast<std::size_t>(i * cols + j)])) *
                scale);
    }
  return t;
}

QuantizedWeight random_quantized_weight(std::int64_t rows, std::int64_t cols, int axis,
                                        double scale) {
  QuantizedWeight w;
  w.rows = rows;
  w.cols = cols;
  w.axis = axis;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> spread(0.5, 2.0);
  w.data.resize(static_cast<std::size_t>(rows * cols));
  for (auto& code : w.data) code = float_to_e4m3_bits(normal(rng()) * 64.0f);
  const std::int64_t count = axis < 0 ? 1 : axis == 0 ? rows : cols;
  // The codes above spread to about 64: the scales bring the values to `scale`.
  for (std::int64_t i = 0; i < count; ++i)
    w.scales.push_back(static_cast<float>(scale / 64.0 * spread(rng())));
  return w;
}

QuantizedLayer make_quantized_layer(ge2_dtype_t dtype, std::int64_t m, std::int64_t n,
                                    std::int64_t k, bool trans_b, int axis) {
  QuantizedLayer layer;
  layer.dtype = dtype;
  layer.m = m;
  layer.trans_b = trans_b;
  layer.weight = trans_b ? random_quantized_weight(n, k, axis, 1.0 / std::sqrt(double(k)))
                         : random_quantized_weight(k, n, axis, 1.0 / std::sqrt(double(k)));
  layer.x = make_tensor(dtype, {m, k});
  fill_random(layer.x);
  layer.bias = make_tensor(dtype, {n});
  fill_random(layer.bias, -0.5, 0.5);
  return layer;
}

std::vector<double> QuantizedLayer::reference(std::int64_t rows) const {
  HostTensor head = make_tensor(dtype, {rows, x.shape[1]});
  std::copy_n(x.bytes.begin(), head.bytes.size(), head.bytes.begin());
  GemmRef attrs;
  attrs.trans_b = trans_b;
  attrs.act = act;
  return gemm_reference(head, weight.value(), nullptr, &bias, attrs);
}

GraphPtr quantized_layer_graph(const QuantizedLayer& layer) {
  GraphPtr graph = make_graph();
  const ge2_tensor_desc_t dx = layer.x.desc(), dbias = layer.bias.desc();
  const ge2_tensor_desc_t dw{layer.dtype, 2, {layer.weight.rows, layer.weight.cols}, {}};
  ge2_value_t vx, vw, vb, vy;
  if (layer.dynamic)
    GE2_CHECK(ge2_graph_add_dynamic_input(graph.get(), "x", &dx, &vx));
  else
    GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &dx, &vx));
  GE2_CHECK(ge2_graph_add_quantized_constant(graph.get(), "w", &dw, GE2_DTYPE_F8_E4M3,
                                             layer.weight.data.data(), layer.weight.scales.data(),
                                             static_cast<std::int64_t>(layer.weight.scales.size()),
                                             layer.weight.axis, &vw));
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "bias", &dbias, layer.bias.bytes.data(), &vb));
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_b = layer.trans_b;
  GE2_CHECK(ge2_graph_add_gemm_bias_act(graph.get(), vx, vw, vb, &attrs, layer.act, &vy));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), vy, "y", nullptr));
  return graph;
}

}  // namespace ge2::test
