#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/cuda_raii.hpp"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/dtype_dispatch.cuh"
#include "backends/cuda/tune_kernels.hpp"

namespace ge2::cuda {
namespace {

__device__ __forceinline__ float hash_uniform(std::uint64_t index, std::uint64_t seed) {
  std::uint64_t z = index + seed * 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

template <typename T>
__global__ void fill_kernel(T* data, long long count, std::uint64_t seed) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    data[i] = from_float<T>(hash_uniform(static_cast<std::uint64_t>(i), seed));
}

template <typename T>
__global__ void difference_kernel(const T* x, const T* ref, long long count, double* sums) {
  double diff = 0, norm = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const double a = to_float(x[i]), b = to_float(ref[i]);
    diff += (a - b) * (a - b);
    norm += b * b;
    if (!isfinite(a)) diff = INFINITY;
  }
  atomicAdd(&sums[0], diff);
  atomicAdd(&sums[1], norm);
}

unsigned blocks_for(long long count) {
  return static_cast<unsigned>(
      std::max<long long>(1, std::min<long long>((count + 255) / 256, 4096)));
}

}  // namespace

void fill_uniform(void* data, DType dtype, std::int64_t count, std::uint64_t seed,
                  cudaStream_t stream) {
  with_cuda_type(dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    fill_kernel<<<blocks_for(count), 256, 0, stream>>>(static_cast<T*>(data), count, seed);
  });
  GE2_CUDA_CHECK(cudaGetLastError());
}

double relative_difference(const void* x, const void* ref, DType dtype, std::int64_t count,
                           cudaStream_t stream) {
  DeviceBuffer sums(2 * sizeof(double));
  GE2_CUDA_CHECK(cudaMemsetAsync(sums.data(), 0, 2 * sizeof(double), stream));
  auto* s = static_cast<double*>(sums.data());
  with_cuda_type(dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    difference_kernel<<<blocks_for(count), 256, 0, stream>>>(static_cast<const T*>(x),
                                                             static_cast<const T*>(ref), count, s);
  });
  GE2_CUDA_CHECK(cudaGetLastError());
  double host[2] = {0, 0};
  GE2_CUDA_CHECK(cudaMemcpyAsync(host, s, sizeof(host), cudaMemcpyDeviceToHost, stream));
  GE2_CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::sqrt(host[0]) / std::max(std::sqrt(host[1]), 1e-30);
}

}  // namespace ge2::cuda
