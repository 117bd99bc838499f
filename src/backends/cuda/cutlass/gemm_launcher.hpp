// ge2's CUTLASS sm90a GEMMs as seen from C++ code that does not include CUTLASS:
// D = act(alpha * A B^T + beta * C + bias), A row-major [M, K], B an [N, K]
// weight (nn.Linear's layout), C and D row-major [M, N], batched over L.
// Each tile configuration is one instance in its own translation unit
// (instance_*.cu), so that the costly compiles run in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ge2::cuda::cutlass_kernels {

// CUTLASS's RasterOrderOptions: Heuristic walks along N when the problem has
// at least as many tiles in M as in N, else along M.
enum class TileRaster : int { Heuristic = 0, AlongM = 1, AlongN = 2 };

// A configuration's CTA tile and cluster, in output elements and CTAs.
struct TileShape {
  int tile_m = 0, tile_n = 0, cluster_m = 1, cluster_n = 1;
};

struct GemmArgs {
  int m = 0, n = 0, k = 0, batch = 1;
  // Leading dimensions and batch strides in elements.
  const void* a = nullptr;
  std::int64_t lda = 0, batch_stride_a = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0, batch_stride_b = 0;
  const void* c = nullptr;  // read only when beta != 0
  std::int64_t ldc = 0, batch_stride_c = 0;
  void* d = nullptr;
  std::int64_t ldd = 0, batch_stride_d = 0;
  const void* bias = nullptr;  // [N] or nullptr
  float alpha = 1.0f, beta = 0.0f;
  int activation = 0;  // a ge2::Activation value, applied in the epilogue
  int device = 0, sm_count = 0;
  // The persistent tile scheduler's walk over the output tiles: up to
  // `max_swizzle` (1, 2, 4 or 8) tiles side by side along the minor dimension
  // before the walk moves along the major one, which `raster` names
  // (backends/cuda/cutlass_tile_walk.hpp says why it matters).
  int max_swizzle = 1;
  TileRaster raster = TileRaster::Heuristic;
};

inline bool same_arguments(const GemmArgs& x, const GemmArgs& y) {
  return x.m == y.m && x.n == y.n && x.k == y.k && x.batch == y.batch && x.a == y.a &&
         x.lda == y.lda && x.batch_stride_a == y.batch_stride_a && x.b == y.b && x.ldb == y.ldb &&
         x.batch_stride_b == y.batch_stride_b && x.c == y.c && x.ldc == y.ldc &&
         x.batch_stride_c == y.batch_stride_c && x.d == y.d && x.ldd == y.ldd &&
         x.batch_stride_d == y.batch_stride_d && x.bias == y.bias && x.alpha == y.alpha &&
         x.beta == y.beta && x.activation == y.activation && x.device == y.device &&
         x.sm_count == y.sm_count && x.max_swizzle == y.max_swizzle && x.raster == y.raster;
}

class GemmLauncher {
 public:
  virtual ~GemmLauncher() = default;
  // Empty when CUTLASS accepts the shapes and strides (pointers are not looked
  // at), else its reason.
  virtual std::string check(const GemmArgs& args) const = 0;
  // Launches on `stream`; empty on success, else what failed. The kernel
  // parameters of the previous call are reused when the arguments are the same.
  virtual std::string launch(const GemmArgs& args, void* workspace, std::size_t workspace_bytes,
                             cudaStream_t stream) = 0;
  // "cooperative 128x256x64, cluster 2x1", for plans and tuning rows; ", activation
  // compiled in" follows for the instances of one activation.
  virtual std::string configuration() const = 0;
  virtual TileShape tile() const = 0;
};

// One per instance file.
std::unique_ptr<GemmLauncher> make_f16_cooperative_128x256();
std::unique_ptr<GemmLauncher> make_f16_pingpong_64x128();
std::unique_ptr<GemmLauncher> make_f16_pingpong_128x128();
std::unique_ptr<GemmLauncher> make_bf16_cooperative_128x256();
std::unique_ptr<GemmLauncher> make_bf16_pingpong_64x128();
std::unique_ptr<GemmLauncher> make_bf16_pingpong_128x128();
// One activation compiled into the epilogue.
std::unique_ptr<GemmLauncher> make_f16_pingpong_128x128_gelu_erf();
std::unique_ptr<GemmLauncher> make_f16_pingpong_128x128_silu();
std::unique_ptr<GemmLauncher> make_bf16_pingpong_128x128_gelu_erf();
std::unique_ptr<GemmLauncher> make_bf16_pingpong_128x128_silu();
// The gated epilogue (gated_epilogue.cuh): n is the accumulator's width, gate
// and up interleaved in B's rows and the bias; D is [M, n / 2]; no C.
std::unique_ptr<GemmLauncher> make_f16_pingpong_128x128_gated();
std::unique_ptr<GemmLauncher> make_bf16_pingpong_128x128_gated();

}  // namespace ge2::cuda::cutlass_kernels
