// Helpers of the GPU tests (test_gpu*.cpp): device memory for run_gemm_case
// and friends, the size picker, tolerances and the plan's chosen kernel.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "support/api_helpers.hpp"

namespace ge2::test {

// Copies host bytes to the device and waits for the copy: from pageable memory
// cudaMemcpy may return while its DMA still runs, and work on a non-blocking stream
// is not ordered after it (run 23: a replay read D before the poison landed).
inline void copy_to_device(void* device, const void* host, std::size_t bytes) {
  REQUIRE(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
}

class DeviceMemory final : public Memory {
 public:
  // `stream`: where the helpers execute plans (nullptr: the legacy default stream).
  explicit DeviceMemory(cudaStream_t stream = nullptr) : stream_(stream) {}
  ~DeviceMemory() override {
    for (void* p : allocations_) cudaFree(p);
  }
  void* upload(HostTensor& t) override {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, t.bytes.size()) == cudaSuccess);
    allocations_.push_back(p);
    copy_to_device(p, t.bytes.data(), t.bytes.size());
    return p;
  }
  void download(void* p, HostTensor& t) override {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(t.bytes.data(), p, t.bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  }
  void* stream() override { return stream_; }

 private:
  cudaStream_t stream_;
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

// Runs the layer's plan with every operand copied to device memory at each byte
// offset from a 256-byte boundary (D poisoned first) and checks D against the
// fp64 reference: kernels that need aligned pointers must hand the unaligned
// executions to a path that takes them.
inline void check_at_offsets(LinearLayer& layer, std::initializer_list<std::size_t> offsets) {
  HostTensor* tensors[] = {&layer.a, &layer.b, &layer.bias, &layer.d};
  std::size_t slot = 256;
  for (const HostTensor* t : tensors) slot = std::max(slot, (t->bytes.size() + 511) / 256 * 256);
  void* block = nullptr;
  REQUIRE(cudaMalloc(&block, 4 * slot) == cudaSuccess);
  for (std::size_t offset : offsets) {
    CAPTURE(offset);
    poison(layer.d);
    auto at = [&](int i) { return static_cast<char*>(block) + i * slot + offset; };
    for (int i = 0; i < 4; ++i)
      REQUIRE(cudaMemcpy(at(i), tensors[i]->data(), tensors[i]->bytes.size(),
                         cudaMemcpyHostToDevice) == cudaSuccess);
    ge2_binding_t bindings[] = {{"a", at(0)}, {"b", at(1)}, {"bias", at(2)}, {"d", at(3)}};
    REQUIRE_MESSAGE(ge2_plan_execute(layer.plan.get(), bindings, 4, nullptr) == GE2_OK,
                    std::string(ge2_last_error()));
    REQUIRE(cudaMemcpy(layer.d.data(), at(3), layer.d.bytes.size(), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    CHECK(relative_error(layer.d, layer.reference) <= 1e-2);
  }
  cudaFree(block);
}

}  // namespace ge2::test
