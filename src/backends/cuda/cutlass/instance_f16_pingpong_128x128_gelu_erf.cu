// One CUTLASS instance per file: f16, pingpong 128x128, erf GELU compiled into the epilogue.
#include "backends/cuda/cutlass/gemm_kernel.cuh"

namespace ge2::cuda::cutlass_kernels {

std::unique_ptr<GemmLauncher> make_f16_pingpong_128x128_gelu_erf() {
  return std::make_unique<CutlassGemm<::cutlass::half_t, Pingpong128x128, Fixed<GeluErf>::Fn>>();
}

}  // namespace ge2::cuda::cutlass_kernels
