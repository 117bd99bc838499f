#include "support/quantized_weight.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <utility>

#include "core/dtype.hpp"
#include "support/fp8_layer.hpp"

namespace ge2::test {

double QuantizedWeight::scale(std::int64_t i, std::int64_t j) const {
  if (block_rows > 0) {
    const std::int64_t grid_cols = (cols + block_cols - 1) / block_cols;
    return scales.at(static_cast<std::size_t>((i / block_rows) * grid_cols + j / block_cols));
  }
  return scales.at(static_cast<std::size_t>(axis < 0 ? 0 : axis == 0 ? i : j));
}

HostTensor QuantizedWeight::value() const {
  HostTensor t = make_tensor(GE2_DTYPE_F32, {rows, cols});
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j)
      t.set(i * cols + j,
            static_cast<double>(e4m3_bits_to_float(data[static_cast<std::size_t>(i * cols + j)])) *
                scale(i, j));
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

QuantizedWeight random_block_quantized_weight(std::int64_t rows, std::int64_t cols,
                                              std::int64_t block_rows, std::int64_t block_cols,
                                              double scale) {
  QuantizedWeight w = random_quantized_weight(rows, cols, -1, scale);
  w.block_rows = block_rows;
  w.block_cols = block_cols;
  const std::int64_t count =
      ((rows + block_rows - 1) / block_rows) * ((cols + block_cols - 1) / block_cols);
  std::uniform_real_distribution<double> spread(0.25, 4.0);  // blocks differ more than channels
  w.scales.clear();
  for (std::int64_t i = 0; i < count; ++i)
    w.scales.push_back(static_cast<float>(scale / 64.0 * spread(rng())));
  return w;
}

ge2_value_t add_quantized_weight(ge2_graph_t* graph, const char* name, ge2_dtype_t dtype,
                                 const QuantizedWeight& w) {
  const ge2_tensor_desc_t desc{dtype, 2, {w.rows, w.cols}, {}};
  const auto count = static_cast<std::int64_t>(w.scales.size());
  ge2_value_t value = GE2_NO_VALUE;
  if (w.block_rows > 0)
    GE2_CHECK(ge2_graph_add_block_quantized_constant(graph, name, &desc, GE2_DTYPE_F8_E4M3,
                                                     w.data.data(), w.scales.data(), count,
                                                     w.block_rows, w.block_cols, &value));
  else
    GE2_CHECK(ge2_graph_add_quantized_constant(graph, name, &desc, GE2_DTYPE_F8_E4M3, w.data.data(),
                                               w.scales.data(), count, w.axis, &value));
  return value;
}

namespace {
QuantizedLayer layer_of(ge2_dtype_t dtype, std::int64_t m, std::int64_t n, std::int64_t k,
                        bool trans_b, QuantizedWeight weight) {
  QuantizedLayer layer;
  layer.dtype = dtype;
  layer.m = m;
  layer.trans_b = trans_b;
  layer.weight = std::move(weight);
  layer.x = make_tensor(dtype, {m, k});
  fill_random(layer.x);
  layer.bias = make_tensor(dtype, {n});
  fill_random(layer.bias, -0.5, 0.5);
  return layer;
}
}  // namespace

QuantizedLayer make_quantized_layer(ge2_dtype_t dtype, std::int64_t m, std::int64_t n,
                                    std::int64_t k, bool trans_b, int axis) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(k));
  return layer_of(dtype, m, n, k, trans_b,
                  trans_b ? random_quantized_weight(n, k, axis, scale)
                          : random_quantized_weight(k, n, axis, scale));
}

QuantizedLayer make_block_quantized_layer(ge2_dtype_t dtype, std::int64_t m, std::int64_t n,
                                          std::int64_t k, bool trans_b, std::int64_t block_n,
                                          std::int64_t block_k) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(k));
  return layer_of(dtype, m, n, k, trans_b,
                  trans_b ? random_block_quantized_weight(n, k, block_n, block_k, scale)
                          : random_block_quantized_weight(k, n, block_k, block_n, scale));
}

std::vector<double> QuantizedLayer::reference(std::int64_t rows) const {
  HostTensor head = make_tensor(dtype, {rows, x.shape[1]});
  std::copy_n(x.bytes.begin(), head.bytes.size(), head.bytes.begin());
  GemmRef attrs;
  attrs.trans_b = trans_b;
  attrs.act = act;
  return gemm_reference(head, weight.value(), nullptr, &bias, attrs);
}

std::vector<double> QuantizedLayer::block_fp8_reference(std::int64_t rows,
                                                        bool requantize_w) const {
  const std::int64_t k = x.shape[1];
  std::vector<double> xv(static_cast<std::size_t>(rows * k));
  for (std::int64_t i = 0; i < rows * k; ++i) xv[static_cast<std::size_t>(i)] = x.get(i);
  round_blocks_to_e4m3(xv, rows, k, 1, 128, true);
  HostTensor xq = make_tensor(GE2_DTYPE_F32, {rows, k});
  for (std::int64_t i = 0; i < rows * k; ++i) xq.set(i, xv[static_cast<std::size_t>(i)]);
  HostTensor w = weight.value();
  if (requantize_w) {
    HostTensor stored = make_tensor(dtype, {weight.rows, weight.cols});
    std::vector<double> wv(static_cast<std::size_t>(weight.rows * weight.cols));
    for (std::size_t i = 0; i < wv.size(); ++i) {
      stored.set(static_cast<std::int64_t>(i), w.get(static_cast<std::int64_t>(i)));
      wv[i] = stored.get(static_cast<std::int64_t>(i));
    }
    round_blocks_to_e4m3(wv, weight.rows, weight.cols, 128, 128, true);
    for (std::size_t i = 0; i < wv.size(); ++i) w.set(static_cast<std::int64_t>(i), wv[i]);
  }
  GemmRef attrs;
  attrs.trans_b = trans_b;
  attrs.act = act;
  return gemm_reference(xq, w, nullptr, &bias, attrs);
}

GraphPtr quantized_layer_graph(const QuantizedLayer& layer) {
  GraphPtr graph = make_graph();
  const ge2_tensor_desc_t dx = layer.x.desc(), dbias = layer.bias.desc();
  ge2_value_t vx, vb, vy;
  if (layer.dynamic)
    GE2_CHECK(ge2_graph_add_dynamic_input(graph.get(), "x", &dx, &vx));
  else
    GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &dx, &vx));
  const ge2_value_t vw = add_quantized_weight(graph.get(), "w", layer.dtype, layer.weight);
  GE2_CHECK(ge2_graph_add_constant(graph.get(), "bias", &dbias, layer.bias.bytes.data(), &vb));
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_b = layer.trans_b;
  GE2_CHECK(ge2_graph_add_gemm_bias_act(graph.get(), vx, vw, vb, &attrs, layer.act, &vy));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), vy, "y", nullptr));
  return graph;
}

}  // namespace ge2::test
