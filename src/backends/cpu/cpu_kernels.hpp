// Reference kernels on the host: storage in f16/bf16/f32, arithmetic in f32,
// any strides. They define what every other backend must compute.
#pragma once

#include "ir/kernel_problems.hpp"

namespace ge2::cpu {

// The most threads a GEMM uses unless $GE2_CPU_THREADS says otherwise: the CPUs
// this process may run on (its affinity mask), at most 16.
unsigned default_gemm_threads();

// `threads`: the most threads (>= 1) the GEMM may use, the caller's among them;
// small GEMMs use one. Results are the same bits for any count.
void gemm(const GemmProblem& problem, const void* a, const void* b, const void* c, const void* bias,
          void* d, unsigned threads);

// cpu_fp8_ref: each row of op(A) and each column (output channel) of op(B)
// rounded to FP8 e4m3 through its own scale (amax / 448), then the same loop in
// f32 with the scales multiplied back (D[i, j] by scale_a[i] * scale_b[j]): what
// lt_fp8_e4m3 computes, up to the order of its fp32 sums. One batch, after
// folding it into M.
void gemm_fp8(const GemmProblem& problem, const void* a, const void* b, const void* c,
              const void* bias, void* d, unsigned threads);

void elementwise(const ElementwiseProblem& problem, const void* x, const void* bias, const void* y,
                 void* out);

}  // namespace ge2::cpu
