// Which form cuda_skinny runs (backends/cuda/gemm_steps.hpp, skinny_form) without a
// GPU: tensor cores only on request (GE2_SKINNY_TENSOR_CORES=1), for 16-bit data from
// two rows on compute capability 8.0 and later; the plan text names the form.
#include <doctest/doctest.h>

#include <string>

#include "backends/cuda/gemm_steps.hpp"
#include "support/scoped_env.hpp"

using ge2::DeviceInfo;
using ge2::DType;
using ge2::GemmProblem;
using ge2::cuda::skinny_configuration;
using ge2::cuda::skinny_form;
using ge2::cuda::SkinnyForm;
using ge2::test::ScopedEnv;

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

TEST_CASE("skinny form: CUDA cores unless tensor cores are requested and fit") {
  const DeviceInfo hopper = device_of(9, 0);
  {
    const ScopedEnv unset("GE2_SKINNY_TENSOR_CORES", nullptr);
    CHECK(skinny_form(rows_of(DType::F16, 8), hopper) == SkinnyForm::CudaCores);
  }
  for (const char* off : {"0", "", "yes", "2", "1 "}) {  // the last three: a warning, then off
    CAPTURE(off);
    const ScopedEnv value("GE2_SKINNY_TENSOR_CORES", off);
    CHECK(skinny_form(rows_of(DType::BF16, 8), hopper) == SkinnyForm::CudaCores);
  }
  const ScopedEnv on("GE2_SKINNY_TENSOR_CORES", "1");
  for (DType dtype : {DType::F16, DType::BF16})
    for (std::int64_t m : {2, 3, 8, 16}) {
      CAPTURE(m);
      CHECK(skinny_form(rows_of(dtype, m), hopper) == SkinnyForm::TensorCores);
      CHECK(skinny_form(rows_of(dtype, m), device_of(8, 0)) == SkinnyForm::TensorCores);
      CHECK(skinny_form(rows_of(dtype, m), device_of(7, 5)) ==
            SkinnyForm::CudaCores);  // no mma bf16
    }
  CHECK(skinny_form(rows_of(DType::F16, 1), hopper) == SkinnyForm::CudaCores);  // one row
  CHECK(skinny_form(rows_of(DType::F32, 4), hopper) == SkinnyForm::CudaCores);  // 32-bit data
}

TEST_CASE(
    "skinny form: the configuration text names the form (tuning rows of one are stale for the "
    "other)") {
  const std::string cores = skinny_configuration(SkinnyForm::CudaCores);
  const std::string tensor = skinny_configuration(SkinnyForm::TensorCores);
  CHECK(cores != tensor);
  CHECK(tensor.find("tensor cores (mma.sync m16n8k16)") != std::string::npos);
  CHECK(cores.find("tensor cores") == std::string::npos);
}
