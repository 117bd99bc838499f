// Activation functions in the exact forms the API documents (host side).
#pragma once

#include <cmath>

#include "ir/graph.hpp"

namespace ge2 {

inline float apply_activation(Activation act, float x) {
  switch (act) {
    case Activation::None:
      return x;
    case Activation::Relu:
      return x > 0.0f ? x : 0.0f;
    case Activation::GeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Activation::GeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
  }
  return x;
}

}  // namespace ge2
