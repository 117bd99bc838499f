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
  int axis = -1;                   // -1: one scale; 0: per row; 1: per column
  std::vector<std::uint8_t> data;  // rows x cols e4m3 codes, row-major, no NaN
  std::vector<float> scales;
  // e4m3(data) * scale, exact in fp64, as an f32 tensor (the product has at most
  // 28 significant bits: f32 keeps it to 2^-24, far below any bound used).
  HostTensor value() const;
};

// Codes of N(0, 1) values (so every binade near 1 and some saturation at 448 are
// hit) and scales of about `scale`, varied by up to 2x per channel.
QuantizedWeight random_quantized_weight(std::int64_t rows, std::int64_t cols, int axis,
                                        double scale);

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
};
QuantizedLayer make_quantized_layer(ge2_dtype_t dtype, std::int64_t m, std::int64_t n,
                                    std::int64_t k, bool trans_b, int axis);
GraphPtr quantized_layer_graph(const QuantizedLayer& layer);

}  // namespace ge2::test
