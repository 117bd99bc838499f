#include "backends/cuda/cutlass_tile_walk.hpp"

#include <fmt/format.h>

#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/log.hpp"

namespace ge2::cuda {
namespace {

using cutlass_kernels::GemmArgs;
using cutlass_kernels::TileRaster;
using cutlass_kernels::TileShape;

struct TileWalk {
  int swizzle = 1;
  TileRaster raster = TileRaster::Heuristic;
};

std::optional<TileWalk> walk_from_env() {
  const char* text = std::getenv("GE2_CUTLASS_TILE_WALK");
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string_view value(text);
  TileWalk walk;
  const char swizzle = value[0];
  bool valid = swizzle == '1' || swizzle == '2' || swizzle == '4' || swizzle == '8';
  walk.swizzle = swizzle - '0';
  if (value.size() == 3 && value[1] == ',') {
    if (value[2] == 'm')
      walk.raster = TileRaster::AlongM;
    else if (value[2] == 'n')
      walk.raster = TileRaster::AlongN;
    else
      valid = valid && value[2] == 'h';
  } else {
    valid = valid && value.size() == 1;
  }
  if (!valid) {
    Logger{}(LogLevel::Warning,
             "GE2_CUTLASS_TILE_WALK='{}' is not <1|2|4|8>[,h|m|n]; the default walk is used", text);
    return std::nullopt;
  }
  return walk;
}

std::int64_t ceil_to(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Output tiles the scheduler walks with 2^log_swizzle tiles side by side:
// CUTLASS rounds both tile counts up to multiples of 2^log_swizzle clusters.
std::int64_t walked_tiles(const GemmArgs& g, const TileShape& tile, int log_swizzle) {
  const std::int64_t tiles_m = (g.m + tile.tile_m - 1) / tile.tile_m;
  const std::int64_t tiles_n = (g.n + tile.tile_n - 1) / tile.tile_n;
  return ceil_to(tiles_m, std::int64_t{tile.cluster_m} << log_swizzle) *
         ceil_to(tiles_n, std::int64_t{tile.cluster_n} << log_swizzle) * g.batch;
}

// Swizzle 2 along N, measured on an H100 (run 20, bench/cutlass_tile_walk.py, 12
// layer, gated and 2I-wide shapes from 512 to 16384 rows on the 128x128 and
// 128x256 configurations): within 1.4% of the best of eight walks on every
// shape and up to 21% faster than CUTLASS's default walk (the gated unit at
// 8192x4096x11008: 2287 against 2911 us; the 2I-wide GEMM at 3000 and 8192 rows
// 11-18%). Where its rounding would add more than 5% of tiles (M of one or two
// tile rows, odd tile counts of small problems), CUTLASS's default walk stays.
constexpr double kMaxSwizzleWaste = 1.05;

}  // namespace

void choose_tile_walk(GemmArgs& g, const TileShape& tile) {
  assert(tile.tile_m > 0 && tile.tile_n > 0 && tile.cluster_m > 0 && tile.cluster_n > 0);
  TileWalk walk;
  if (walked_tiles(g, tile, 1) <= kMaxSwizzleWaste * walked_tiles(g, tile, 0))
    walk = {2, TileRaster::AlongN};
  if (const auto forced = walk_from_env()) walk = *forced;
  g.max_swizzle = walk.swizzle;
  g.raster = walk.raster;
}

std::string describe_tile_walk(const GemmArgs& g) {
  constexpr const char* kRaster[] = {"CUTLASS's heuristic order", "along M", "along N"};
  return fmt::format("swizzle {}, {}", g.max_swizzle, kRaster[static_cast<int>(g.raster)]);
}

}  // namespace ge2::cuda
