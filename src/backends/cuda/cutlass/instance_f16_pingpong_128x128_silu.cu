// One CUTLASS instance per file: f16, pingpong 128x128, silu compiled into
// the epilogue (the run-time dispatch costs several times more there on small K).
#include "backends/cuda/cutlass/gemm_kernel.cuh"

namespace ge2::cuda::cutlass_kernels {

std::unique_ptr<GemmLauncher> make_f16_pingpong_128x128_silu() {
  return std::make_unique<
      CutlassGemm<::cutlass::half_t, Pingpong128x128, CompiledActivation<Silu>::Fn>>();
}

}  // namespace ge2::cuda::cutlass_kernels
