// Activations: one row per activation in one table, and one functor per
// activation for host and device code alike (in the style of CUTLASS's
// epilogue/thread/activation.h), so that each formula exists once. Adding an
// activation is a C enum value, a functor, a row and its tests.
#pragma once

#include <cmath>
#include <cstddef>
#include <iterator>

#include "core/host_device.hpp"
#include "ge_v2_api.h"

namespace ge2 {

enum class Activation : int {
  None = GE2_ACT_NONE,
  Relu = GE2_ACT_RELU,
  GeluErf = GE2_ACT_GELU_ERF,
  GeluTanh = GE2_ACT_GELU_TANH,
  Silu = GE2_ACT_SILU,
  QuickGelu = GE2_ACT_QUICK_GELU,
};

// The device's fast exponential and division (ex2.approx and rcp.approx with a
// multiply: a few instructions instead of expf's and IEEE division's dozens,
// which an epilogue pays per element); std::exp2 and division on the host. Both
// are accurate to a few fp32 ulps on the ranges the activations use.
// 2^x: ex2.approx itself on the device (exp2f).
GE2_HOST_DEVICE float fast_exp2(float x) {
#ifdef __CUDA_ARCH__
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}
// e^x as 2^(x log2 e): on the device the very instructions of __expf.
GE2_HOST_DEVICE float fast_exp(float x) { return fast_exp2(x * 1.44269504088896341f); }
// x / y; for y = inf (exp overflowed) the result is 0, the limit the callers want.
GE2_HOST_DEVICE float fast_divide(float x, float y) {
#ifdef __CUDA_ARCH__
  return __fdividef(x, y);
#else
  return x / y;
#endif
}

// x
struct Identity {
  GE2_HOST_DEVICE float operator()(float x) const { return x; }
};
// max(x, 0)
struct Relu {
  GE2_HOST_DEVICE float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
// x * Phi(x): torch.nn.GELU()'s default form, computed as x * sigmoid(h(x)) with h the
// logit of Phi, an odd function fitted as x P(x^2), P of degree 6 (weighted minimax of the
// error of Phi over [0, 7]: |error| <= 2.9e-8, fp32 evaluation ~1.5e-7 |x|). P carries
// -log2(e), so exp(-h) is one ex2: 12 instructions per element against the 16 of the erfc form
// of Abramowitz & Stegun 7.1.26 it replaced, in epilogues whose cost is their instruction
// count (bench/cutlass_epilogue_probe; docs/cutlass.md). Beyond the fit the leading
// coefficient keeps h's sign and exp saturates to the right limit (0 or inf; x / inf = 0).
// The price: relative accuracy in the far negative tail, where the output is tiny (2.5% at
// x = -5, an output of -1.4e-6; erff's 1 + erf loses 7% there).
// x / (1 + 2^(x P(x^2))), P's coefficients from the highest power down (Horner).
template <typename... Lower>
GE2_HOST_DEVICE float gelu_by_logit_polynomial(float x, float highest, Lower... lower) {
  const float s = x * x;
  float p = highest;
  ((p = fmaf(p, s, lower)), ...);
  return fast_divide(x, 1.0f + fast_exp2(x * p));
}
struct GeluErf {
  GE2_HOST_DEVICE float operator()(float x) const {
    return gelu_by_logit_polynomial(x, -5.067567255e-09f, 3.816405183e-07f, -1.143992540e-05f,
                                    1.595803333e-04f, 9.404846787e-05f, -1.048351228e-01f,
                                    -2.302209377e+00f);
  }
};
// x * 0.5 * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3):
// GELU(approximate='tanh'), computed as x / (1 + exp(-2u)) (the same function).
struct GeluTanh {
  GE2_HOST_DEVICE float operator()(float x) const {
    const float two_u = 1.5957691216057308f * fmaf(0.044715f * x, x * x, x);
    return fast_divide(x, 1.0f + fast_exp(-two_u));
  }
};
// x * sigmoid(x) = x / (1 + exp(-x)): torch.nn.SiLU(). For x < -88 exp(-x) is
// inf and the quotient -0, the limit.
struct Silu {
  GE2_HOST_DEVICE float operator()(float x) const { return fast_divide(x, 1.0f + fast_exp(-x)); }
};
// x * sigmoid(1.702 x) = x / (1 + exp(-1.702 x)): CLIP's QuickGELU, a sigmoid
// approximation of GELU that CLIP's weights were trained with.
struct QuickGelu {
  GE2_HOST_DEVICE float operator()(float x) const {
    return fast_divide(x, 1.0f + fast_exp(-1.702f * x));
  }
};

// f(functor) for the functor of `act`: the one dispatch from the enum to the
// functors. Kernels that take the functor as a template parameter use it on the
// host to pick their instantiation; apply_activation uses it per element.
template <typename F>
GE2_HOST_DEVICE decltype(auto) visit_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::Relu:
      return f(Relu{});
    case Activation::GeluErf:
      return f(GeluErf{});
    case Activation::GeluTanh:
      return f(GeluTanh{});
    case Activation::Silu:
      return f(Silu{});
    case Activation::QuickGelu:
      return f(QuickGelu{});
    case Activation::None:
      break;
  }
  return f(Identity{});
}

// act(x), with the activation chosen at run time.
GE2_HOST_DEVICE float apply_activation(Activation act, float x) {
  return visit_activation(act, [x](auto functor) { return functor(x); });
}

// act(gate) * up: the gated (GLU) unit, SwiGLU with SiLU, GeGLU with GELU.
// `act` is a functor above (a CUTLASS epilogue and the CPU reference pass one
// from visit_activation).
template <typename F>
GE2_HOST_DEVICE float gated_product(F act, float gate, float up) {
  return act(gate) * up;
}

// Which cuBLASLt epilogue family computes an activation in the GEMM (with or
// without bias); kNone: cuBLASLt has none and a separate pass over D runs it.
enum class LtEpilogue { kIdentity, kRelu, kGeluTanh, kNone };

struct ActivationInfo {
  Activation act;
  const char* name;  // in plans, tuning keys, messages, the Python binding
  LtEpilogue cublaslt;
};

inline constexpr ActivationInfo kActivations[] = {
    {Activation::None, "none", LtEpilogue::kIdentity},
    {Activation::Relu, "relu", LtEpilogue::kRelu},
    {Activation::GeluErf, "gelu_erf", LtEpilogue::kNone},  // cuBLASLt's GELU is the tanh form
    {Activation::GeluTanh, "gelu_tanh", LtEpilogue::kGeluTanh},
    {Activation::Silu, "silu", LtEpilogue::kNone},
    {Activation::QuickGelu, "quick_gelu", LtEpilogue::kNone},
};
// The rows are indexed by the C value: 0, 1, 2, ... without gaps.
static_assert(std::size(kActivations) == GE2_ACT_QUICK_GELU + 1,
              "one row per ge2_activation_t value");

// Whether a C caller's int names an activation.
constexpr bool is_valid_activation(int value) {
  return value >= 0 && static_cast<std::size_t>(value) < std::size(kActivations);
}

// The row of a valid activation.
constexpr const ActivationInfo& activation_info(Activation act) {
  return kActivations[static_cast<std::size_t>(act)];
}

inline const char* activation_name(Activation act) { return activation_info(act).name; }

}  // namespace ge2
