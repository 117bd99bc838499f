// One CUTLASS instance per file: f16, cooperative 128x256, erf GELU compiled into the epilogue.
#include "backends/cuda/cutlass/gemm_kernel.cuh"

namespace ge2::cuda::cutlass_kernels {

std::unique_ptr<GemmLauncher> make_f16_cooperative_128x256_gelu_erf() {
  return std::make_unique<CutlassGemm<::cutlass::half_t, Cooperative128x256, Fixed<GeluErf>::Fn>>();
}

}  // namespace ge2::cuda::cutlass_kernels
