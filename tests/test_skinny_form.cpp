// How cuda_skinny runs a problem (backends/cuda/gemm_steps.hpp, skinny_launch)
// without a GPU: tensor cores for 16-bit data from two rows on compute capability
// 8.0 and later, CUDA cores otherwise; K split over blocks where the grid fills the
// chip unevenly (skinny_k_splits); the plan text names the form, its configuration
// and the split.
#include <doctest/doctest.h>

#include <string>

#include "backends/cuda/gemm_steps.hpp"

using ge2::DeviceInfo;
using ge2::DType;
using ge2::GemmProblem;
using ge2::skinny_k_splits;
using ge2::cuda::skinny_configuration;
using ge2::cuda::skinny_launch;
using ge2::cuda::SkinnyForm;
using ge2::cuda::SkinnyLaunch;

namespace {

GemmProblem rows_of(DType dtype, std::int64_t m) {
  GemmProblem p;
  p.dtype = dtype;
  p.m = m;
  p.n = 4096;
  p.k = 4096;
  return p;
}

DeviceInfo device_of(int major, int minor) {
  DeviceInfo device;
  device.has_cuda = true;
  device.cc_major = major;
  device.cc_minor = minor;
  device.sm_count = 132;
  return device;
}

}  // namespace

TEST_CASE("skinny form: tensor cores for 16-bit data from two rows on sm_80 and later") {
  const DeviceInfo hopper = device_of(9, 0);
  auto form = [](const GemmProblem& p, const DeviceInfo& d) { return skinny_launch(p, d, 3).form; };
  for (DType dtype : {DType::F16, DType::BF16})
    for (std::int64_t m : {2, 3, 8, 9, 16}) {
      CAPTURE(m);
      CHECK(form(rows_of(dtype, m), hopper) == SkinnyForm::TensorCores);
      CHECK(form(rows_of(dtype, m), device_of(8, 0)) == SkinnyForm::TensorCores);
      CHECK(form(rows_of(dtype, m), device_of(7, 5)) == SkinnyForm::CudaCores);  // no mma bf16
    }
  CHECK(form(rows_of(DType::F16, 1), hopper) == SkinnyForm::CudaCores);  // one row
  CHECK(form(rows_of(DType::F32, 4), hopper) == SkinnyForm::CudaCores);  // 32-bit data
}

TEST_CASE("skinny form: K is split where a grid of long blocks fills 3/4 to 2 waves") {
  // 132 SMs x 3 blocks: 396 slots; N / 16 tiles, K / 32 steps (run 24's weights, N x K).
  const std::int64_t slots = 396;
  auto splits = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    return skinny_k_splits(m, (n + 15) / 16, (k + 31) / 32, slots);
  };
  CHECK(splits(8, 8192, 28672) == 4);  // 1.29 waves of 896 steps
  CHECK(splits(2, 7168, 18432) == 4);  // 1.13 waves
  CHECK(splits(8, 6144, 16384) == 4);  // 0.97 waves of 512 steps
  CHECK(splits(2, 5120, 27648) == 4);  // 0.81 waves
  CHECK(splits(8, 8192, 8192) == 2);   // 1.29 waves of 256 steps: two splits of 128
  CHECK(splits(8, 5120, 13824) == 1);  // 0.81 waves of 432 steps: too short under one wave
  CHECK(splits(8, 11008, 4096) == 1);  // 1.74 waves of 128 steps
  CHECK(splits(8, 4096, 11008) == 1);  // 0.65 waves
  CHECK(splits(8, 3584, 18944) == 1);  // 0.57 waves
  CHECK(splits(8, 14336, 4096) == 1);  // 2.26 waves
  CHECK(splits(8, 57344, 8192) == 1);  // 9 waves
  CHECK(splits(9, 8192, 28672) == 1);  // 9-16 rows: never
  CHECK(splits(16, 8192, 28672) == 1);
  CHECK(skinny_k_splits(8, 512, 896, 0) == 1);  // no occupancy known
  // Every split keeps 128 steps or more.
  for (std::int64_t steps = 1; steps <= 4096; steps += 37) {
    const int s = skinny_k_splits(8, 500, steps, slots);
    CHECK(s >= 1);
    CHECK(s <= 4);
    CHECK((s == 1 || steps / s >= 128));
  }

  const DeviceInfo hopper = device_of(9, 0);
  GemmProblem p = rows_of(DType::BF16, 8);
  p.n = 8192;
  p.k = 28672;
  CHECK(skinny_launch(p, hopper, 3).k_splits == 4);
  CHECK(skinny_launch(p, hopper, 1).k_splits == 1);  // 132 slots: 3.9 waves, a small tail
  p.batch = 2;                                       // own weights per batch: not split
  CHECK(skinny_launch(p, hopper, 3).k_splits == 1);
  p.batch = 1;
  p.m = 1;  // CUDA cores: not split
  CHECK(skinny_launch(p, hopper, 3).k_splits == 1);
}

TEST_CASE(
    "skinny form: the configuration text names the form and the split (tuning rows of one are "
    "stale for another)") {
  const std::string cores = skinny_configuration({SkinnyForm::CudaCores, 1});
  const std::string tensor = skinny_configuration({SkinnyForm::TensorCores, 1});
  const std::string split = skinny_configuration({SkinnyForm::TensorCores, 4});
  CHECK(cores != tensor);
  CHECK(tensor != split);
  CHECK(split != skinny_configuration({SkinnyForm::TensorCores, 2}));
  CHECK(tensor.find("tensor cores (mma.sync m16n8k16)") != std::string::npos);
  CHECK(tensor.find("over 16 columns per block") != std::string::npos);
  CHECK(tensor.find("K split") == std::string::npos);
  CHECK(split.find("K split over 4 blocks per column tile") != std::string::npos);
  CHECK(cores.find("tensor cores") == std::string::npos);
  // cuda_skinny_fp8w's instance: steps of 64 k, 16 e4m3 bytes of B per lane.
  const std::string e4m3 = skinny_configuration({SkinnyForm::TensorCores, 2}, true);
  CHECK(e4m3.find("on an e4m3 B widened to the 16-bit dtype exactly") != std::string::npos);
  CHECK(e4m3.find("steps of 64 in flight per warp (16 bytes of B per lane)") != std::string::npos);
  CHECK(e4m3.find("K split over 2 blocks per column tile") != std::string::npos);
  CHECK(e4m3 != skinny_configuration({SkinnyForm::TensorCores, 2}));
}
