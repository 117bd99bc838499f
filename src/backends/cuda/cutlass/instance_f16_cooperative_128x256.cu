// One CUTLASS instance per file: f16, cooperative 128x256.
#include "backends/cuda/cutlass/gemm_kernel.cuh"

namespace ge2::cuda::cutlass_kernels {

std::unique_ptr<GemmLauncher> make_f16_cooperative_128x256() {
  return std::make_unique<CutlassGemm<::cutlass::half_t, Cooperative128x256>>();
}

}  // namespace ge2::cuda::cutlass_kernels
