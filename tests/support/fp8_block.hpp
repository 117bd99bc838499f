// Two nn.Linear layers compiled under the FP8 precision policy, x [tokens, hidden]
// -> h = act(x w1ᵀ + b1) [tokens, inter] -> y = h w2ᵀ + b2, the weights and biases
// constants: as one plan, and as two plans with h the output of the first and
// the input of the second. In one plan the first GEMM's activation is deferred
// into the second GEMM's e4m3 quantization (plan_steps.cpp); the two forms must
// agree to the bit, and both be within e4m3's bound of fp64.
#pragma once

#include <nlohmann/json.hpp>

#include "support/api_helpers.hpp"

namespace ge2::test {

struct Fp8BlockCase {
  ge2_dtype_t dtype = GE2_DTYPE_F16;
  std::int64_t tokens = 37, hidden = 64, inter = 96;
  ge2_activation_t act = GE2_ACT_GELU_ERF;
  const char* force_kernel = nullptr;  // both GEMMs; nullptr: the selector's choice
  // The one plan also outputs h (a second reader of h: nothing is deferred).
  bool h_also_output = false;
  // The one plan's y is bound one element past a 16-byte boundary: a CUDA FP8
  // step runs its 16-bit fallback then, which needs h activated in place first.
  bool misaligned_y = false;
};

struct Fp8BlockResult {
  nlohmann::json first, second;  // the one plan's two GEMM steps, as its text gives them
  double one_vs_two_plans = 0;   // y's relative difference between the two forms
  double vs_fp64 = 0;            // y of the one plan against the fp64 block
};

// Compiles both forms on `context`, runs them on fresh random x with y poisoned.
Fp8BlockResult run_fp8_block(ge2_context_t* context, Memory& memory, const Fp8BlockCase& c);

}  // namespace ge2::test
