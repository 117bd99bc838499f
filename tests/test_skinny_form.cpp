// Which form cuda_skinny runs (backends/cuda/gemm_steps.hpp, skinny_form) without a
// GPU: tensor cores for 16-bit data from two rows on compute capability 8.0 and
// later, CUDA cores otherwise; the plan text names the form and its configuration.
#include <doctest/doctest.h>

#include <string>

#include "backends/cuda/gemm_steps.hpp"

using ge2::DeviceInfo;
using ge2::DType;
using ge2::GemmProblem;
using ge2::cuda::skinny_configuration;
using ge2::cuda::skinny_form;
using ge2::cuda::SkinnyForm;

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
  for (DType dtype : {DType::F16, DType::BF16})
    for (std::int64_t m : {2, 3, 8, 9, 16}) {
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
    "skinny form: the configuration text names the form and the block width (tuning rows of one "
    "are stale for another)") {
  const std::string cores = skinny_configuration(SkinnyForm::CudaCores, 1);
  const std::string tensor = skinny_configuration(SkinnyForm::TensorCores, 8);
  const std::string wide = skinny_configuration(SkinnyForm::TensorCores, 9);
  CHECK(cores != tensor);
  CHECK(tensor != wide);
  CHECK(skinny_configuration(SkinnyForm::TensorCores, 2) == tensor);
  CHECK(skinny_configuration(SkinnyForm::TensorCores, 16) == wide);
  CHECK(tensor.find("tensor cores (mma.sync m16n8k16)") != std::string::npos);
  CHECK(tensor.find("over 16 columns per block") != std::string::npos);
  CHECK(wide.find("over 32 columns per block") != std::string::npos);
  CHECK(cores.find("tensor cores") == std::string::npos);
}
