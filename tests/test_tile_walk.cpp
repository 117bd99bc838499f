// The CUTLASS tile-walk rule (backends/cuda/cutlass_tile_walk.hpp) without a GPU:
// which walk each problem gets, and GE2_CUTLASS_TILE_WALK's override and its refusals.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "backends/cuda/cutlass_tile_walk.hpp"
#include "support/scoped_env.hpp"

using ge2::cuda::choose_tile_walk;
using ge2::cuda::describe_tile_walk;
using ge2::cuda::cutlass_kernels::GemmArgs;
using ge2::cuda::cutlass_kernels::TileRaster;
using ge2::cuda::cutlass_kernels::TileShape;
using ge2::test::ScopedEnv;

namespace {

constexpr TileShape kPingpong128{128, 128, 2, 1};
constexpr TileShape kCooperative128x256{128, 256, 2, 1};

GemmArgs walked(int m, int n, int batch, const TileShape& tile) {
  GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = 4096;
  g.batch = batch;
  choose_tile_walk(g, tile);
  return g;
}

// The variable holds `value` (a ScopedEnv set it).
void require_walk_env(const char* value) {
  const char* set = std::getenv("GE2_CUTLASS_TILE_WALK");
  REQUIRE((set != nullptr && std::string(set) == value));
}

}  // namespace

TEST_CASE("tile walk: swizzle 2 along N unless its rounding adds more than 5% of the tiles") {
  const ScopedEnv unset("GE2_CUTLASS_TILE_WALK", nullptr);
  struct Case {
    int m, n, batch;
    TileShape tile;
    const char* walk;
  };
  constexpr const char* kSwizzled = "swizzle 2, along N";
  constexpr const char* kDefault = "swizzle 1, CUTLASS's heuristic order";
  const Case cases[] = {// FFN shapes: tile counts the swizzle's rounding leaves alone.
                        {4096, 11008, 1, kPingpong128, kSwizzled},
                        {8192, 22016, 1, kPingpong128, kSwizzled},
                        {2048, 4096, 1, kPingpong128, kSwizzled},
                        {512, 22016, 1, kPingpong128, kSwizzled},
                        // 43 tiles of 256 columns rounded to 44: 2.3% more, still taken.
                        {4096, 11008, 1, kCooperative128x256, kSwizzled},
                        // One tile row (two with the cluster) would become four, five eight, three
                        // N tiles four: CUTLASS's own walk stays.
                        {100, 4096, 1, kPingpong128, kDefault},
                        {520, 4096, 1, kPingpong128, kDefault},
                        {4096, 384, 3, kPingpong128, kDefault}};
  for (const Case& c : cases) {
    CAPTURE(c.m);
    CAPTURE(c.n);
    const GemmArgs g = walked(c.m, c.n, c.batch, c.tile);
    CHECK(describe_tile_walk(g) == c.walk);
    CHECK(g.max_swizzle == (c.walk == kSwizzled ? 2 : 1));
    CHECK(g.raster == (c.walk == kSwizzled ? TileRaster::AlongN : TileRaster::Heuristic));
  }
}

TEST_CASE("tile walk: GE2_CUTLASS_TILE_WALK overrides the choice; other values are ignored") {
  {
    const ScopedEnv env("GE2_CUTLASS_TILE_WALK", "8,m");
    require_walk_env("8,m");
    const GemmArgs g = walked(100, 4096, 1, kPingpong128);
    CHECK(g.max_swizzle == 8);
    CHECK(g.raster == TileRaster::AlongM);
  }
  {
    const ScopedEnv env("GE2_CUTLASS_TILE_WALK", "4");
    require_walk_env("4");
    const GemmArgs g = walked(4096, 11008, 1, kPingpong128);
    CHECK(g.max_swizzle == 4);
    CHECK(g.raster == TileRaster::Heuristic);
  }
  {
    const ScopedEnv env("GE2_CUTLASS_TILE_WALK", "1,n");
    require_walk_env("1,n");
    CHECK(describe_tile_walk(walked(4096, 11008, 1, kPingpong128)) == "swizzle 1, along N");
  }
  // Not a walk: a warning, and the walk the rule chooses.
  for (const char* bad : {"3", "2,x", "2,", "16", "8,nn", "n", " 2", "2,m "}) {
    CAPTURE(bad);
    const ScopedEnv env("GE2_CUTLASS_TILE_WALK", bad);
    require_walk_env(bad);
    const GemmArgs big = walked(4096, 11008, 1, kPingpong128);
    CHECK(big.max_swizzle == 2);
    CHECK(big.raster == TileRaster::AlongN);
    const GemmArgs small = walked(100, 4096, 1, kPingpong128);
    CHECK(small.max_swizzle == 1);
    CHECK(small.raster == TileRaster::Heuristic);
  }
}
