// Programmatic dependent launch (compute capability 9.0 and later): a kernel
// launched with launch_dependent() may be scheduled while the kernel before it
// on the stream is still finishing, so the launch's latency overlaps that
// kernel's tail instead of following it. Stream capture keeps the relation as a
// programmatic edge of the graph. On older devices, or when the previous work is
// not a kernel, the launch is an ordinary one.
//
// The contract: such a kernel calls wait_for_producer() before it reads or
// writes any memory the kernel before it may touch; wait_for_producer() returns
// once that kernel has completed and its writes are visible. It is a no-op in a
// kernel launched the ordinary way.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace ge2::cuda {

__device__ __forceinline__ void wait_for_producer() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), programmatically
// dependent on the previous kernel of `stream` when `dependent`; the launch's
// error, as cudaLaunchKernelEx returns it.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block,
                             std::size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = dependent ? &attribute : nullptr;
  config.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace ge2::cuda
