// A weight as an FP8 checkpoint gives it (e4m3 bytes and their scales), its
// exact value for fp64 references, and a one-layer graph that reads it through
// ge2_graph_add_quantized_constant; shared by the CPU and GPU suites.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/api_helpers.hpp"

namespace ge2::test {

struct QuantizedWeight {
  std::int64_t rows = 0, cols = 0;
  int axis = -1;  // -1: one scale; 0: per row; 1: per column
  // Both > 0: one scale per block of block_rows x block_cols instead (axis unused;
  // ge2_graph_add_block_quantized_constant), scales row-major by block row.
  std::int64_t block_rows = 0, block_cols = 0;
  std::vector<std::uint8_t> data;  // rows x cols e4m3 codes, row-major, no NaN
  std::vector<float> scales;
  double scale(std::int64_t i, std::int64_t j) const;
  // e4m3(data) * scale, exact in fp64, as an f32 tensor (the product has at most
  // 28 significant bits: f32 keeps it to 2^-24, far below any bound used).
  HostTensor value() const;
};

// Codes of N(0, 1) values (so every binade near 1 and some saturation at 448 are
// hit) and scales of about `scale`, varied by up to 2x per channel.
QuantizedWeight random_quantized_weight(std::int64_t rows, std::int64_t cols, int axis,
                                        double scale);
// The same with a scale per block of block_rows x block_cols.
QuantizedWeight random_block_quantized_weight(std::int64_t rows, std::int64_t cols,
                                              std::int64_t block_rows, std::int64_t block_cols,
                                              double scale);
// Adds `w` to `graph` as a quantized constant (the block form when it has blocks).
ge2_value_t add_quantized_weight(ge2_graph_t* graph, const char* name, ge2_dtype_t dtype,
                                 const QuantizedWeight& w);

// y = act(x op(w) + bias) with x an input [m, k] (dynamic with bound m when
// `dynamic`), w the quantized constant (trans_b: [n, k]), bias a constant [n].
struct QuantizedLayer {
  ge2_dtype_t dtype = GE2_DTYPE_F16;
  std::int64_t m = 8;
  bool trans_b = true;
  bool dynamic = false;
  ge2_activation_t act = GE2_ACT_GELU_ERF;
  QuantizedWeight weight;
  HostTensor x, bias;
  std::vector<double> reference(std::int64_t rows) const;  // fp64, first `rows` rows
  // The same with x rounded to e4m3 per row and 128 columns (lt_fp8_e4m3 on a weight
  // given in 128 x 128 blocks) and w as given, or with `requantize_w` w's value in
  // the layer's dtype rounded again per 128 x 128 block (cpu_fp8_ref, which quantizes
  // the value it reads).
  std::vector<double> block_fp8_reference(std::int64_t rows, bool requantize_w) const;
};
QuantizedLayer make_quantized_layer(ge2_dtype_t dtype, std::int64_t m, std::int64_t n,
                                    std::int64_t k, bool trans_b, int axis);
// The same with the weight's scales per block of block_n output channels x block_k
// (the stored weight's blocks: [block_n, block_k] with trans_b, else [block_k, block_n]).
QuantizedLayer make_block_quantized_layer(ge2_dtype_t dtype, std::int64_t m, std::int64_t n,
                                          std::int64_t k, bool trans_b, std::int64_t block_n,
                                          std::int64_t block_k);
GraphPtr quantized_layer_graph(const QuantizedLayer& layer);

}  // namespace ge2::test
