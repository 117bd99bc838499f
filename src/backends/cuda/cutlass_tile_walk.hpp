// The order in which a CUTLASS persistent kernel walks its output tiles.
//
// Each wave of CTAs (one per SM) reads the A rows and B columns of the tiles it
// covers; what the next wave reads again is served from L2 only while it is still
// there. CUTLASS's default walk goes down one dimension a tile column at a time
// (swizzle 1, along M when the problem has more tiles in N): at 8192x22016x4096
// bf16 a wave covers two N-columns of 64 M-tiles and so streams all of A (64 MB,
// more than the H100's 50 MB of L2) once per two columns, and the 128x128 kernel
// ran 35% slower than cuBLASLt there (run 20, H100), while at 2048 rows, where A
// fits in L2, it ran 6% faster. Swizzling 2^s tiles side by side before moving on
// bounds each wave's footprint; it rounds both tile counts up to multiples of
// 2^s times the cluster, and the tiles past the edge are computed on zeros, so a
// large swizzle is not free where that rounding adds tiles.
#pragma once

#include "backends/cuda/cutlass/gemm_launcher.hpp"

namespace ge2::cuda {

// GemmArgs::max_swizzle and ::raster for g's m x n x batch output on `tile`:
// swizzle 2 along N (measured: cutlass_tile_walk.cpp), or CUTLASS's default walk
// where that swizzle's rounding would add more than 5% of the tiles.
// GE2_CUTLASS_TILE_WALK, read at each call, overrides the choice for
// measurements and diagnosis: "<swizzle>" or "<swizzle>,<raster>" with swizzle
// 1, 2, 4 or 8 and raster h (CUTLASS's heuristic), m or n; another value is
// ignored with a warning.
void choose_tile_walk(cutlass_kernels::GemmArgs& g, const cutlass_kernels::TileShape& tile);

// "swizzle 8 along N": for plans and tuning rows.
std::string describe_tile_walk(const cutlass_kernels::GemmArgs& g);

}  // namespace ge2::cuda
