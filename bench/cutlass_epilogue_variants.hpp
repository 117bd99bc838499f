// Epilogue variants for the CUTLASS epilogue probe (bench/cutlass_epilogue_probe.cpp),
// all on the bf16 ping-pong 128x128 configuration: the library's run-time
// activation dispatch, its formulas compiled in one at a time, and formulas ge2
// used before (erff, expf with IEEE division; the Abramowitz-Stegun erf GELU)
// or did not take, for comparison.
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

// erf GELU as ge2 computed it before session 22: x Phi(x) with erfc from Abramowitz & Stegun
// 7.1.26 (|error of erf| <= 1.5e-7; for x < 0 Phi is erfc / 2, which keeps the tail's
// relative accuracy): 16 instructions per element and two MUFU operations.
struct AbramowitzStegunGeluErf {
  GE2_HOST_DEVICE float operator()(float x) const {
    const float z = fabsf(x) * 0.70710678118654752f;
    const float t = fast_divide(1.0f, fmaf(0.3275911f, z, 1.0f));
    const float p =
        fmaf(t, fmaf(t, fmaf(t, fmaf(t, 1.061405429f, -1.453152027f), 1.421413741f), -0.284496736f),
             0.254829592f);
    const float erfc_z = t * p * fast_exp(-z * z);
    const float phi = x >= 0.0f ? fmaf(-0.5f, erfc_z, 1.0f) : 0.5f * erfc_z;
    return x * phi;
  }
};
// The library's sigmoid form (core/activation.hpp, GeluErf) with P of degree 4 instead of 6:
// two FMAs fewer, |error of Phi| <= 1.5e-6 (1e-6 |x| on the output fails the activation
// tests' bound), to see what two instructions cost.
struct SigmoidGeluErf4 {
  GE2_HOST_DEVICE float operator()(float x) const {
    return gelu_by_logit_polynomial(x, -4.111710950e-06f, 1.058751150e-04f, 2.534128726e-04f,
                                    -1.050059423e-01f, -2.302165270e+00f);
  }
};

using cuda::cutlass_kernels::GemmLauncher;
std::unique_ptr<GemmLauncher> make_runtime();
std::unique_ptr<GemmLauncher> make_compiled_identity();
std::unique_ptr<GemmLauncher> make_compiled_gelu_tanh();
std::unique_ptr<GemmLauncher> make_compiled_gelu_erf();
std::unique_ptr<GemmLauncher> make_compiled_libm_gelu_erf();
std::unique_ptr<GemmLauncher> make_compiled_silu();
std::unique_ptr<GemmLauncher> make_compiled_libm_silu();
std::unique_ptr<GemmLauncher> make_compiled_as_gelu_erf();
std::unique_ptr<GemmLauncher> make_compiled_sigmoid4_gelu_erf();

}  // namespace ge2::probe
