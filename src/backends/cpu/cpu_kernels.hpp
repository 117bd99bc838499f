// Reference kernels on the host: storage in f16/bf16/f32, arithmetic in f32,
// any strides. They define what every other backend must compute.
#pragma once

#include "ir/kernel_problems.hpp"

namespace ge2::cpu {

void gemm(const GemmProblem& problem, const void* a, const void* b, const void* c, const void* bias,
          void* d);

void elementwise(const ElementwiseProblem& problem, const void* x, const void* bias, const void* y,
                 void* out);

}  // namespace ge2::cpu
