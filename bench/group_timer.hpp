// What the benchmarks and kernel probes share to time GPU work: groups of
// back-to-back launches between two CUDA events, contenders in a rotated order
// every round (reversed every other round, so clocks and power that drift affect
// all alike), and the median of the rounds.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "cuda_or_die.hpp"

// Times groups of back-to-back executions between two events.
class GroupTimer {
 public:
  GroupTimer() {
    CUDA_OR_DIE(cudaEventCreate(&start_));
    CUDA_OR_DIE(cudaEventCreate(&stop_));
  }
  ~GroupTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  GroupTimer(const GroupTimer&) = delete;
  GroupTimer& operator=(const GroupTimer&) = delete;

  // Executions per group so that a group holds about 2 ms of GPU work (1..50).
  template <typename Body>
  int group_size(Body&& body, cudaStream_t stream) {
    const double single = time_group(body, 1, 0, stream);
    return static_cast<int>(std::clamp(2000.0 / std::max(single, 1.0), 1.0, 50.0));
  }
  // Mean microseconds per execution over one group: body(first_set + i) for i < group.
  template <typename Body>
  double time_group(Body&& body, int group, int first_set, cudaStream_t stream) {
    CUDA_OR_DIE(cudaEventRecord(start_, stream));
    for (int i = 0; i < group; ++i) body(first_set + i);
    CUDA_OR_DIE(cudaEventRecord(stop_, stream));
    CUDA_OR_DIE(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_OR_DIE(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e3 / group;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// The order in which `count` contenders run in `round`: rotated by the round,
// reversed in odd rounds.
inline std::vector<std::size_t> rotated_order(std::size_t count, int round) {
  std::vector<std::size_t> order(count);
  for (std::size_t i = 0; i < count; ++i) order[i] = (i + round) % count;
  if (round % 2) std::reverse(order.begin(), order.end());
  return order;
}

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
