// The activation of ge2's CUTLASS epilogues, chosen at run time: one kernel
// instance serves every activation (a uniform branch per fragment costs nothing
// measurable next to a second instance's compile time). The formulas are the
// functors of core/activation.hpp, shared with every other ge2 kernel.
#pragma once

#include <cutlass/array.h>
#include <cutlass/cutlass.h>

#include "core/activation.hpp"

namespace ge2::cuda::cutlass_kernels {

// Sm90Compute passes a compute functor's Arguments to every call.
struct ActivationArguments {
  int activation = 0;  // a ge2::Activation value
};

template <typename T>
struct RuntimeActivation {
  using Arguments = ActivationArguments;
  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& args) const {
    return T(apply_activation(static_cast<Activation>(args.activation), static_cast<float>(x)));
  }
};

template <typename T, int N>
struct RuntimeActivation<cutlass::Array<T, N>> {
  using Arguments = ActivationArguments;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x,
                                                      Arguments const& args) const {
    return visit_activation(static_cast<Activation>(args.activation), [&](auto functor) {
      cutlass::Array<T, N> result;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) result[i] = T(functor(static_cast<float>(x[i])));
      return result;
    });
  }
};

// One functor compiled into the epilogue: CompiledActivation<F>::Fn, for
// instances measured against the run-time dispatch (bench/cutlass_epilogue_probe).
template <typename Functor>
struct CompiledActivation {
  template <typename T>
  struct Fn {
    CUTLASS_HOST_DEVICE T operator()(T const& x) const {
      return T(Functor{}(static_cast<float>(x)));
    }
  };
  template <typename T, int N>
  struct Fn<cutlass::Array<T, N>> {
    CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x) const {
      cutlass::Array<T, N> result;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) result[i] = T(Functor{}(static_cast<float>(x[i])));
      return result;
    }
  };
};

}  // namespace ge2::cuda::cutlass_kernels
