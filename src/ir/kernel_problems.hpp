// GEMM and elementwise nodes resolved to what kernels need: sizes, stored
// layouts, epilogues. Below the selector and the executor, above the graph.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor_type.hpp"
#include "ir/graph.hpp"

namespace ge2 {

// A gated unit's multiply computed in the GEMM's epilogue: the accumulator's
// columns are [gate | up] (N = 2 * out.cols) and the step writes
// out = act(gate) * up instead of D. Set by the plan for a GEMM whose only reader
// is a gated_mul when the GEMM's kernel has KernelInfo::gated_epilogue.
struct GatedOutput {
  Activation act = Activation::None;
  MatrixView out;
};

struct GemmProblem {
  DType dtype = DType::F16;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  // Stored operands, element (i, j) of batch b at b*batch_stride + i*row_stride + j*col_stride.
  // A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K] when trans_b), C and D are [M,N].
  MatrixView a, b, c, d;
  bool trans_a = false, trans_b = false;
  bool has_c = false, has_bias = false;
  bool b_constant = false;  // B is a constant of the plan (weights): FP8 quantizes it once
  // B is a constant given in e4m3 (ge2_graph_add_quantized_constant): the FP8 rows
  // read those bytes, the weight-only one without allow_fp8. Its scales are one per
  // output channel (N; one for the tensor is repeated) when b_scale_block_k is 0,
  // else one per block of b_scale_block_n x b_scale_block_k of op(B)^T ([N, K]),
  // row-major by N block (ge2_graph_add_block_quantized_constant).
  bool b_e4m3 = false;
  std::int64_t b_scale_block_n = 0, b_scale_block_k = 0;
  std::int64_t bias_stride = 1;
  Activation act = Activation::None;
  float alpha = 1.0f, beta = 0.0f;
  std::optional<GatedOutput> gated;
  // Applied to each element of op(A), rounded to the dtype, before the product:
  // the activation of the GEMM that produced A, deferred by the plan into this
  // GEMM (plan_steps.cpp). Only the FP8 rows take it (their quantization pass
  // reads A anyway); None for every other kernel.
  Activation a_act = Activation::None;

  double flops() const { return 2.0 * static_cast<double>(m) * n * k * batch; }
  // Bytes a kernel must move at least: A, B (and C) read once, D written once.
  double min_bytes() const;
  std::string shape_string() const;  // "MxNxK" or "BxMxNxK"
  // op(A) as an M x K view and op(B) as a K x N view: a transposed operand is
  // read through its swapped strides.
  MatrixView op_a() const;
  MatrixView op_b() const;
};

// The GEMM of a gated unit without the multiply in its epilogue (what it computes
// into D); any other problem unchanged.
inline GemmProblem without_gated_output(GemmProblem problem) {
  problem.gated.reset();
  return problem;
}

// The same GEMM reading A as stored (what an FP8 step's unfused fallback runs
// after activating A in place).
inline GemmProblem without_a_activation(GemmProblem problem) {
  problem.a_act = Activation::None;
  return problem;
}

// The problem of GEMM node `d` of `graph`; `storage[v]` is the memory layout of
// value v (inputs and outputs may be strided). B is marked when it is a constant.
GemmProblem make_gemm_problem(const Graph& graph, ValueId d,
                              const std::vector<TensorType>& storage);

// How an elementwise step combines x with a second operand y.
enum class Combine { None, Add, Mul };

// An elementwise step: out = act(combine(x_act(x), y) + bias), y and bias optional.
// y is seen with x's shape: its strides are 0 along the dimensions it is broadcast over.
struct ElementwiseProblem {
  TensorType x, out;
  Combine combine = Combine::None;
  Activation x_act = Activation::None;  // with combine: applied to x first
  TensorType y;
  std::int64_t y_offset = 0;  // elements from y's slot pointer to its first element
  bool has_bias = false;
  std::int64_t bias_stride = 1;
  Activation act = Activation::None;

  // y's first element, given the pointer bound to y's slot (NULL stays NULL).
  const void* y_at(const void* slot) const {
    if (slot == nullptr) return nullptr;
    return static_cast<const unsigned char*>(slot) +
           y_offset * static_cast<std::int64_t>(dtype_size(y.dtype));
  }
};

// act over `batch` matrices laid out as `view`, in place: the pass after a GEMM
// whose kernel has no epilogue for its activation, or over an A whose producer's
// activation was deferred (plan_steps.cpp) when a step cannot apply it.
ElementwiseProblem activation_in_place(DType dtype, std::int64_t batch, const MatrixView& view,
                                       Activation act);

// The elementwise step of node `id` (a bias add, an activation, an add, a multiply
// or a gated multiply) and the value its y operand reads. Any other kind is
// GE2_ERROR_INTERNAL, never a silent substitute.
std::pair<ElementwiseProblem, ValueId> make_elementwise_problem(
    const Graph& graph, ValueId id, const std::vector<TensorType>& storage);

}  // namespace ge2

// "{}" of a GemmProblem is its shape_string(), built only when a message is (as
// for TensorType).
template <>
struct fmt::formatter<ge2::GemmProblem> : fmt::formatter<std::string_view> {
  auto format(const ge2::GemmProblem& problem, fmt::format_context& context) const {
    return fmt::formatter<std::string_view>::format(problem.shape_string(), context);
  }
};
