// One GEMM problem expressed for cuBLASLt: descriptors built once, row-major
// operands mapped through the transpose trick (D^T = op(B)^T * op(A)^T in
// column-major terms, so the per-column bias of row-major D is cuBLASLt's
// per-row bias), batch strides, epilogue.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_raii.hpp"
#include "ir/kernel_problems.hpp"
#include "select/kernel_id.hpp"

namespace ge2::cuda {

struct LtPointers {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  const void* bias = nullptr;
  void* d = nullptr;
};

struct LtMatmulTypes {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cudaDataType_t data;
};

class LtMatmul {
 public:
  LtMatmul(cublasLtHandle_t handle, const GemmProblem& problem, KernelId kernel);

  // Up to `count` algorithms for this problem whose workspace fits and that
  // accept pointers aligned to `alignment` bytes.
  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(int count, std::size_t max_workspace,
                                                         std::uint32_t alignment) const;
  // The untuned choice (and the tuner's baseline): the heuristic's first algorithm
  // for pointers aligned to `alignment`, under the context's `workspace_bytes`, or
  // under none where unsplit_first_choice() says so (decode-sized GEMMs of many
  // columns, KernelInfo::unsplit_*_untuned) and cuBLASLt offers one there.
  // GE2_LT_DECODE_WORKSPACE=1, read at each call, keeps the workspace everywhere
  // (for measurements). Empty when cuBLASLt offers no algorithm.
  struct FirstChoice {
    cublasLtMatmulHeuristicResult_t result;
    bool without_workspace;  // taken under no workspace by the rule above
  };
  std::optional<FirstChoice> first_choice(std::size_t workspace_bytes,
                                          std::uint32_t alignment) const;
  // Whether `algo` is valid for this problem (cublasLtMatmulAlgoCheck); its workspace need.
  bool check(const cublasLtMatmulAlgo_t& algo, std::size_t* workspace_bytes) const;

  void run(const cublasLtMatmulAlgo_t& algo, const LtPointers& pointers, void* workspace,
           std::size_t workspace_bytes, cudaStream_t stream);
  // lt_fp8_e4m3: device pointers to the dequantization scales of cuBLASLt's first
  // operand (ge2's B) and second (ge2's A); set before run() when they change.
  void set_scale_pointers(const float* first, const float* second);
  // How cuBLASLt reads both operands' scales: one float each (the default),
  // CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, one float per row of each operand (N
  // for the first, M for the second: lt_fp8_e4m3), or for the first and the second
  // apart (BLK128x128_32F and VEC128_32F: lt_fp8_e4m3 on a block-scaled weight). Set
  // before heuristic(): the algorithms depend on it.
  void set_scale_mode(cublasLtMatmulMatrixScale_t mode) { set_scale_modes(mode, mode); }
  void set_scale_modes(cublasLtMatmulMatrixScale_t first, cublasLtMatmulMatrixScale_t second);

  // The activation runs in a separate kernel (cuBLASLt has no erf-GELU epilogue).
  bool needs_separate_activation() const { return separate_activation_; }
  // That kernel's problem: the activation in place over D.
  ElementwiseProblem activation_pass() const;
  const char* epilogue_name() const { return epilogue_name_; }
  const GemmProblem& problem() const { return problem_; }
  KernelId kernel() const { return kernel_; }
  LtMatmulTypes types() const;

 private:
  cublasLtHandle_t handle_;
  GemmProblem problem_;
  KernelId kernel_;
  MatmulDesc desc_;
  MatrixLayout layout_first_, layout_second_, layout_c_, layout_d_;
  const void* bound_bias_ = nullptr;  // the descriptor's bias pointer, set when it changes
  const float* scale_first_ = nullptr;
  const float* scale_second_ = nullptr;
  bool separate_activation_ = false;
  const char* epilogue_name_ = "CUBLASLT_EPILOGUE_DEFAULT";
};

}  // namespace ge2::cuda
