// One nn.Linear layer compiled under the FP8 precision policy, and its two
// oracles: the fp64 layer, and the fp64 layer on operands rounded to e4m3 through
// row-wise scales (each row of x, each output channel of w) by the test's own
// rounding (nearest of the format's values, ties to the even code), which is what
// docs/fp8.md says ge2 computes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "support/api_helpers.hpp"

namespace ge2::test {

// x [m, k] (an input, dynamic up to m when `dynamic`), w [n, k] (a constant unless
// `weight_input`; [k, n] and not transposed unless `nn_linear_weight`), bias [n]
// constant; y = act(x wᵀ + bias) (+ r, an input [m, n]).
struct Fp8LayerCase {
  ge2_dtype_t dtype = GE2_DTYPE_F16;
  std::int64_t m = 8, n = 16, k = 32;
  ge2_activation_t act = GE2_ACT_NONE;
  bool residual = false;
  bool weight_input = false;
  bool nn_linear_weight = true;
  bool dynamic = false;
  bool allow_fp8 = true;
  float max_error = 0.1f;
  const char* force_kernel = nullptr;
  bool graph_replay = false;
  // x bound one element past a 16-byte boundary (a CUDA step's unaligned fallback runs).
  bool misaligned_x = false;
  // Fills x (and r); uniform in [-1, 1) when empty.
  std::function<void(HostTensor&)> fill_x;
  // Sets w and bias after their random fill (two layers on the same constants).
  std::function<void(HostTensor& w, HostTensor& bias)> fill_constants;
  // w's element (0, 0) becomes this many times the others' bound: an outlier a
  // per-tensor scale could not hold together with the rest of w (1 leaves w alone).
  double weight_outlier = 1.0;
  std::string label() const;
};

struct Fp8Layer {
  Fp8Layer(ge2_context_t* context, const Fp8LayerCase& c);
  // Runs at `rows` (<= m; only a dynamic layer takes fewer) on fresh x and r.
  // Returns y's relative error against the fp64 layer, against the fp64 layer
  // on e4m3-rounded operands, and against the fp64 layer on the e4m3-rounded
  // weight and x as it is (the weight-only row, cuda_skinny_fp8w).
  struct Errors {
    double vs_fp64 = 0, vs_e4m3_reference = 0, vs_e4m3_weight_reference = 0;
  };
  Errors run(Memory& memory, std::int64_t rows);

  Fp8LayerCase c;
  HostTensor w, bias;
  PlanPtr plan;
  std::string plan_json;
};

// The test's own e4m3 rounding with saturation at +-448 (not ge2's).
double round_to_e4m3_oracle(double value);
// Each block of block_rows x block_cols of a rows x cols row-major matrix rounded
// to e4m3 through its own scale as docs/fp8.md documents it (x * (448 / amax) in
// float, then the test's own rounding); with `multiply_back` each element is then
// multiplied by its block's scale amax / 448 (the values a GEMM on the block-scaled
// copy reads). Returns the scales, row-major by block row.
std::vector<double> round_blocks_to_e4m3(std::vector<double>& values, std::int64_t rows,
                                         std::int64_t cols, std::int64_t block_rows,
                                         std::int64_t block_cols, bool multiply_back);
}  // namespace ge2::test
