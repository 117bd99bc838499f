// Helpers of the GPU tests (test_gpu*.cpp): device memory for run_gemm_case
// and friends, the size picker, tolerances and the plan's chosen kernel.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

#include "support/api_helpers.hpp"

namespace ge2::test {

class DeviceMemory final : public Memory {
 public:
  ~DeviceMemory() override {
    for (void* p : allocations_) cudaFree(p);
  }
  void* upload(HostTensor& t) override {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, t.bytes.size()) == cudaSuccess);
    allocations_.push_back(p);
    REQUIRE(cudaMemcpy(p, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    return p;
  }
  void download(void* p, HostTensor& t) override {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(t.bytes.data(), p, t.bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  }

 private:
  std::vector<void*> allocations_;
};

inline std::int64_t pick_size(std::mt19937_64& engine) {
  // 1, odd, prime, unaligned and aligned sizes.
  static const std::int64_t sizes[] = {1,  2,   3,   7,   8,   17,  31,  64,
                                       97, 127, 128, 200, 255, 256, 331, 512};
  return sizes[std::uniform_int_distribution<int>(0, 15)(engine)];
}

inline double gpu_tolerance(ge2_dtype_t dtype, const char* kernel) {
  if (dtype == GE2_DTYPE_F32)
    return kernel != nullptr && std::string(kernel) == "lt_tf32" ? 1e-3 : 1e-5;
  return 1e-2;
}

// The selection (kernel, why, candidates) of the plan's first GEMM step; null if none.
inline nlohmann::json selection_of(const std::string& plan_json) {
  const auto plan = nlohmann::json::parse(plan_json);
  for (const auto& step : plan["steps"])
    if (step.contains("selection")) return step["selection"];
  return nullptr;
}

inline std::string chosen_kernel(const std::string& plan_json) {
  const auto selection = selection_of(plan_json);
  return selection.is_null() ? "" : selection["kernel"].get<std::string>();
}

}  // namespace ge2::test
