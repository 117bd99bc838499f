// Reference kernels on the host: storage in f16/bf16/f32, arithmetic in f32,
// any strides. They define what every other backend must compute.
#pragma once

#include "ir/kernel_problems.hpp"

namespace ge2::cpu {

void gemm(const GemmProblem& problem, const void* a, const void* b, const void* c, const void* bias,
          void* d);

// cpu_fp8_ref: op(A) and op(B) each rounded to FP8 e4m3 through one per-tensor
// scale (amax / 448), then the same loop in f32 with the scales multiplied back:
// what lt_fp8_e4m3 computes, up to the order of its fp32 sums. One batch, after
// folding it into M.
void gemm_fp8(const GemmProblem& problem, const void* a, const void* b, const void* c,
              const void* bias, void* d);

void elementwise(const ElementwiseProblem& problem, const void* x, const void* bias, const void* y,
                 void* out);

}  // namespace ge2::cpu
