// One CUTLASS instance per file: bf16, ping-pong 128x128, the gated epilogue
// act(gate) * up on gate/up weights interleaved row by row.
#include "backends/cuda/cutlass/gemm_kernel.cuh"

namespace ge2::cuda::cutlass_kernels {

std::unique_ptr<GemmLauncher> make_bf16_pingpong_128x128_gated() {
  return std::make_unique<CutlassGatedGemm<::cutlass::bfloat16_t, Pingpong128x128>>();
}

}  // namespace ge2::cuda::cutlass_kernels
