// One CUTLASS instance per file: f16, pingpong 128x128.
#include "backends/cuda/cutlass/gemm_kernel.cuh"

namespace ge2::cuda::cutlass_kernels {

std::unique_ptr<GemmLauncher> make_f16_pingpong_128x128() {
  return std::make_unique<CutlassGemm<::cutlass::half_t, Pingpong128x128>>();
}

}  // namespace ge2::cuda::cutlass_kernels
