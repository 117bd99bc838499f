// One CUTLASS instance per file: f16, pingpong 64x128.
#include "backends/cuda/cutlass/gemm_kernel.cuh"

namespace ge2::cuda::cutlass_kernels {

std::unique_ptr<GemmLauncher> make_f16_pingpong_64x128() {
  return std::make_unique<CutlassGemm<::cutlass::half_t, Pingpong64x128>>();
}

}  // namespace ge2::cuda::cutlass_kernels
