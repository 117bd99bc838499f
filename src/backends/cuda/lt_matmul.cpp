#include "backends/cuda/lt_matmul.hpp"
#include "backends/cuda/dtype_dispatch.cuh"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"
#include "select/selector.hpp"

namespace ge2::cuda {
namespace {

// A stored row-major-indexed matrix seen as a column-major matrix for cuBLASLt.
struct ColumnMajor {
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  bool is_transpose_of_stored = false;  // row-major storage appears transposed
};

ColumnMajor column_major(const MatrixView& v) {
  const auto rows = static_cast<std::uint64_t>(v.rows), cols = static_cast<std::uint64_t>(v.cols);
  if (v.col_stride == 1 || (v.cols == 1 && v.row_stride != 1))
    return {cols, rows, std::max<std::int64_t>(v.row_stride, v.cols), true};
  if (v.row_stride == 1 || v.rows == 1)
    return {rows, cols, std::max<std::int64_t>(v.col_stride, v.rows), false};
  fail(GE2_ERROR_UNSUPPORTED,
       "cuBLASLt: a matrix with strides ({}, {}) has no unit-stride dimension", v.row_stride,
       v.col_stride);
}

// C and D are row-major (checked by the selector): their column-major view is the transpose.
ColumnMajor row_major_output(const MatrixView& v, const char* name) {
  require(v.col_stride == 1 || v.cols == 1, GE2_ERROR_UNSUPPORTED,
          "cuBLASLt: {} must be row-major (last stride 1), it has strides ({}, {})", name,
          v.row_stride, v.col_stride);
  return {static_cast<std::uint64_t>(v.cols), static_cast<std::uint64_t>(v.rows),
          std::max<std::int64_t>(v.row_stride, v.cols), true};
}

MatrixLayout batched_layout(cudaDataType_t type, const ColumnMajor& cm, std::int64_t batch,
                            std::int64_t batch_stride) {
  MatrixLayout layout = make_layout(type, cm.rows, cm.cols, cm.ld);
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    GE2_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    GE2_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout.get(),
                                                      CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                      &batch_stride, sizeof(batch_stride)));
  }
  return layout;
}

struct EpilogueChoice {
  cublasLtEpilogue_t epilogue;
  const char* name;
  bool separate_activation;
};

EpilogueChoice choose_epilogue(bool bias, Activation act) {
  switch (activation_info(act).cublaslt) {
    case LtEpilogue::kRelu:
      return bias
                 ? EpilogueChoice{CUBLASLT_EPILOGUE_RELU_BIAS, "CUBLASLT_EPILOGUE_RELU_BIAS", false}
                 : EpilogueChoice{CUBLASLT_EPILOGUE_RELU, "CUBLASLT_EPILOGUE_RELU", false};
    case LtEpilogue::kGeluTanh:
      return bias
                 ? EpilogueChoice{CUBLASLT_EPILOGUE_GELU_BIAS, "CUBLASLT_EPILOGUE_GELU_BIAS", false}
                 : EpilogueChoice{CUBLASLT_EPILOGUE_GELU, "CUBLASLT_EPILOGUE_GELU", false};
    case LtEpilogue::kIdentity:
    case LtEpilogue::kNone:
      break;
  }
  // No activation, or one cuBLASLt has no epilogue for (erf GELU, SiLU): the
  // bias stays in the epilogue and the activation runs as one vectorised pass
  // over D afterwards.
  const bool separate = activation_info(act).cublaslt == LtEpilogue::kNone;
  return bias ? EpilogueChoice{CUBLASLT_EPILOGUE_BIAS, "CUBLASLT_EPILOGUE_BIAS", separate}
              : EpilogueChoice{CUBLASLT_EPILOGUE_DEFAULT, "CUBLASLT_EPILOGUE_DEFAULT", separate};
}

}  // namespace

ElementwiseProblem LtMatmul::activation_pass() const {
  return activation_in_place(problem_.dtype, problem_.batch, problem_.d, problem_.act);
}

LtMatmulTypes LtMatmul::types() const {
  return {kernel_ == KernelId::LtTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
          CUDA_R_32F, cuda_data_type(problem_.dtype)};
}

LtMatmul::LtMatmul(cublasLtHandle_t handle, const GemmProblem& p, KernelId kernel)
    : handle_(handle),
      problem_(p),
      kernel_(kernel),
      desc_(make_matmul_desc(types().compute, types().scale)) {
  const cudaDataType_t type = cuda_data_type(p.dtype);
  const ColumnMajor a = column_major(p.a), b = column_major(p.b);
  // cuBLASLt computes D^T (N x M) = first (N x K) * second (K x M).
  // first = op(B)^T: B's column-major matrix is B^T when stored row-major.
  // Row-major storage already appears as B^T, so it needs no transpose unless trans_b.
  const cublasOperation_t op_first =
      (p.trans_b != b.is_transpose_of_stored) ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_second =
      (p.trans_a != a.is_transpose_of_stored) ? CUBLAS_OP_N : CUBLAS_OP_T;
  GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_TRANSA,
                                                  &op_first, sizeof(op_first)));
  GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_TRANSB,
                                                  &op_second, sizeof(op_second)));
  const EpilogueChoice epilogue = choose_epilogue(p.has_bias, p.act);
  GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                  &epilogue.epilogue, sizeof(epilogue.epilogue)));
  separate_activation_ = epilogue.separate_activation;
  epilogue_name_ = epilogue.name;

  // lt_fp8_e4m3 multiplies ge2's e4m3 copies of the operands (TN: both K-contiguous,
  // which fp8_gemm_step.cpp lays out); C, D and the bias keep the problem's dtype.
  const cudaDataType_t operand_type = is_fp8_kernel(kernel) ? CUDA_R_8F_E4M3 : type;
  if (kernel == KernelId::LtFp8E4M3Fast) {
    const std::int8_t fast = 1;
    GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                                    &fast, sizeof(fast)));
  }
  layout_first_ = batched_layout(operand_type, b, p.batch, p.b.batch_stride);
  layout_second_ = batched_layout(operand_type, a, p.batch, p.a.batch_stride);
  const ColumnMajor d = row_major_output(p.d, "D");
  layout_d_ = batched_layout(type, d, p.batch, p.d.batch_stride);
  if (p.has_c) {
    layout_c_ = batched_layout(type, row_major_output(p.c, "C"), p.batch, p.c.batch_stride);
  } else {
    layout_c_ = batched_layout(type, d, p.batch, p.d.batch_stride);
  }
}

std::vector<cublasLtMatmulHeuristicResult_t> LtMatmul::heuristic(int count,
                                                                 std::size_t max_workspace,
                                                                 std::uint32_t alignment) const {
  MatmulPreference preference = make_preference();
  GE2_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.get(),
                                                        CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &max_workspace, sizeof(max_workspace)));
  for (auto attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    GE2_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.get(), attribute, &alignment,
                                                          sizeof(alignment)));
  }
  // The bias pointer's alignment enters the heuristic through the descriptor.
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(count));
  int returned = 0;
  GE2_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
      handle_, desc_.get(), layout_first_.get(), layout_second_.get(), layout_c_.get(),
      layout_d_.get(), preference.get(), count, results.data(), &returned));
  results.resize(static_cast<std::size_t>(returned));
  std::erase_if(results, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
  return results;
}

std::optional<LtMatmul::FirstChoice> LtMatmul::first_choice(std::size_t workspace_bytes,
                                                            std::uint32_t alignment) const {
  const char* keep = std::getenv("GE2_LT_DECODE_WORKSPACE");
  const bool keep_workspace = keep != nullptr && std::string_view(keep) == "1";
  if (workspace_bytes > 0 && !keep_workspace && unsplit_first_choice(problem_, kernel_))
    if (const auto unsplit = heuristic(1, 0, alignment); !unsplit.empty())
      return FirstChoice{unsplit.front(), true};
  const auto results = heuristic(1, workspace_bytes, alignment);
  if (results.empty()) return std::nullopt;
  return FirstChoice{results.front(), false};
}

bool LtMatmul::check(const cublasLtMatmulAlgo_t& algo, std::size_t* workspace_bytes) const {
  cublasLtMatmulHeuristicResult_t result{};
  const cublasStatus_t status =
      cublasLtMatmulAlgoCheck(handle_, desc_.get(), layout_first_.get(), layout_second_.get(),
                              layout_c_.get(), layout_d_.get(), &algo, &result);
  if (status != CUBLAS_STATUS_SUCCESS || result.state != CUBLAS_STATUS_SUCCESS) return false;
  if (workspace_bytes != nullptr) *workspace_bytes = result.workspaceSize;
  return true;
}

void LtMatmul::set_scale_pointers(const float* first, const float* second) {
  if (first != scale_first_) {
    GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        desc_.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &first, sizeof(first)));
    scale_first_ = first;
  }
  if (second != scale_second_) {
    GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        desc_.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &second, sizeof(second)));
    scale_second_ = second;
  }
}

void LtMatmul::set_scale_modes(cublasLtMatmulMatrixScale_t first,
                               cublasLtMatmulMatrixScale_t second) {
  const auto first_value = static_cast<std::int32_t>(first);
  const auto second_value = static_cast<std::int32_t>(second);
  GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                  &first_value, sizeof(first_value)));
  GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                  &second_value, sizeof(second_value)));
}

void LtMatmul::run(const cublasLtMatmulAlgo_t& algo, const LtPointers& ptr, void* workspace,
                   std::size_t workspace_bytes, cudaStream_t stream) {
  if (problem_.has_bias) {
    GE2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &ptr.bias, sizeof(ptr.bias)));
  }
  const float alpha = problem_.alpha;
  const float beta = problem_.has_c ? problem_.beta : 0.0f;
  // Operands are swapped by the transpose trick: B's memory first, then A's.
  GE2_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_.get(), &alpha, ptr.b, layout_first_.get(), ptr.a,
                                  layout_second_.get(), &beta, problem_.has_c ? ptr.c : ptr.d,
                                  layout_c_.get(), ptr.d, layout_d_.get(), &algo, workspace,
                                  workspace_bytes, stream));
}

}  // namespace ge2::cuda
