// One CUTLASS instance per file: bf16, pingpong 128x128, gelu_erf compiled into
// the epilogue (the run-time dispatch costs several times more there on small K).
#include "backends/cuda/cutlass/gemm_kernel.cuh"

namespace ge2::cuda::cutlass_kernels {

std::unique_ptr<GemmLauncher> make_bf16_pingpong_128x128_gelu_erf() {
  return std::make_unique<
      CutlassGemm<::cutlass::bfloat16_t, Pingpong128x128, CompiledActivation<GeluErf>::Fn>>();
}

}  // namespace ge2::cuda::cutlass_kernels
