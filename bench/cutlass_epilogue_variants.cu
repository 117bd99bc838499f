// The instances of bench/cutlass_epilogue_probe.cpp. Compiled four times
// (GE2_PROBE_PART 0..3) so that they build in parallel.
#include "backends/cuda/cutlass/gemm_kernel.cuh"
#include "cutlass_epilogue_variants.hpp"

namespace ge2::probe {

using cuda::cutlass_kernels::CompiledActivation;
using cuda::cutlass_kernels::CutlassGemm;
using cuda::cutlass_kernels::Pingpong128x128;
using Bf16 = ::cutlass::bfloat16_t;
template <typename Functor>
using Compiled = CutlassGemm<Bf16, Pingpong128x128, CompiledActivation<Functor>::template Fn>;

#if GE2_PROBE_PART == 0
std::unique_ptr<GemmLauncher> make_runtime() {
  return std::make_unique<CutlassGemm<Bf16, Pingpong128x128>>();
}
std::unique_ptr<GemmLauncher> make_compiled_identity() {
  return std::make_unique<Compiled<Identity>>();
}
std::unique_ptr<GemmLauncher> make_compiled_gelu_tanh() {
  return std::make_unique<Compiled<GeluTanh>>();
}
#elif GE2_PROBE_PART == 1
std::unique_ptr<GemmLauncher> make_compiled_gelu_erf() {
  return std::make_unique<Compiled<GeluErf>>();
}
std::unique_ptr<GemmLauncher> make_compiled_libm_gelu_erf() {
  return std::make_unique<Compiled<LibmGeluErf>>();
}
#elif GE2_PROBE_PART == 3
std::unique_ptr<GemmLauncher> make_compiled_as_gelu_erf() {
  return std::make_unique<Compiled<AbramowitzStegunGeluErf>>();
}
std::unique_ptr<GemmLauncher> make_compiled_sigmoid4_gelu_erf() {
  return std::make_unique<Compiled<SigmoidGeluErf4>>();
}
#else
std::unique_ptr<GemmLauncher> make_compiled_silu() { return std::make_unique<Compiled<Silu>>(); }
std::unique_ptr<GemmLauncher> make_compiled_libm_silu() {
  return std::make_unique<Compiled<LibmSilu>>();
}
#endif

}  // namespace ge2::probe
