// Epilogue variants for the CUTLASS epilogue probe (bench/cutlass_epilogue_probe.cpp),
// all on the bf16 ping-pong 128x128 configuration: the library's run-time
// activation dispatch, its formulas compiled in one at a time, and the libm
// formulas ge2 used before (erff, expf with IEEE division) for comparison.
#pragma once

#include <cmath>
#include <memory>

#include "backends/cuda/cutlass/gemm_launcher.hpp"
#include "core/activation.hpp"

namespace ge2::probe {

// GELU through libm's erff: 0.5 x (1 + erf(x / sqrt 2)).
struct LibmGeluErf {
  GE2_HOST_DEVICE float operator()(float x) const {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  }
};
// SiLU through expf and IEEE division.
struct LibmSilu {
  GE2_HOST_DEVICE float operator()(float x) const { return x / (1.0f + expf(-x)); }
};

using cuda::cutlass_kernels::GemmLauncher;
std::unique_ptr<GemmLauncher> make_runtime();
std::unique_ptr<GemmLauncher> make_compiled_identity();
std::unique_ptr<GemmLauncher> make_compiled_gelu_erf();
std::unique_ptr<GemmLauncher> make_compiled_libm_gelu_erf();
std::unique_ptr<GemmLauncher> make_compiled_silu();
std::unique_ptr<GemmLauncher> make_compiled_libm_silu();

}  // namespace ge2::probe
