// Launch geometry and address helpers shared by ge2's CUDA kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace ge2::cuda {

// 2-D grid: y over rows (all batches), x over a row's items in blocks of
// `threads`; both capped, the kernels' loops stride over the rest.
inline dim3 grid_2d(long long rows_total, long long per_row_items, int threads) {
  const long long x = std::min<long long>((per_row_items + threads - 1) / threads, 64);
  const long long y = std::min<long long>(rows_total, 65535);
  return dim3(static_cast<unsigned>(std::max<long long>(1, x)),
              static_cast<unsigned>(std::max<long long>(1, y)));
}

// Bytes past the last 16-byte boundary.
__host__ __device__ inline int misalignment_bytes(const void* p) {
  return static_cast<int>(reinterpret_cast<std::uintptr_t>(p) & 15u);
}

}  // namespace ge2::cuda
