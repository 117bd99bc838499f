// GE2_HOST_DEVICE: a function compiled for host and device alike (nvcc), or a
// plain inline function in host-only builds, so that one formula serves both.
#pragma once

#ifdef __CUDACC__
#define GE2_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GE2_HOST_DEVICE inline
#endif
