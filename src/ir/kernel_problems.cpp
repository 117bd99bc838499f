#include "ir/kernel_problems.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ge2 {

double GemmProblem::min_bytes() const {
  const double elements =
      static_cast<double>(batch) * (static_cast<double>(m) * k + static_cast<double>(k) * n +
                                    static_cast<double>(m) * n * (has_c ? 2.0 : 1.0));
  return elements * static_cast<double>(dtype_size(dtype));
}

MatrixView GemmProblem::op_a() const {
  return {batch,
          m,
          k,
          a.batch_stride,
          trans_a ? a.col_stride : a.row_stride,
          trans_a ? a.row_stride : a.col_stride};
}

MatrixView GemmProblem::op_b() const {
  return {batch,
          k,
          n,
          b.batch_stride,
          trans_b ? b.col_stride : b.row_stride,
          trans_b ? b.row_stride : b.col_stride};
}

std::string GemmProblem::shape_string() const {
  return batch > 1 ? fmt::format("{}x{}x{}x{}", batch, m, n, k) : fmt::format("{}x{}x{}", m, n, k);
}

GemmProblem make_gemm_problem(const Graph& graph, ValueId d,
                              const std::vector<TensorType>& storage) {
  const Node& node = graph.node(d);
  auto type_of = [&](ValueId id) -> const TensorType& {
    return storage.at(static_cast<std::size_t>(id));
  };
  GemmProblem p;
  const TensorType& a = type_of(node.a);
  const TensorType& b = type_of(node.b);
  const TensorType& d_type = type_of(d);
  p.dtype = a.dtype;
  p.a = matrix_view(a);
  p.b = matrix_view(b);
  p.d = matrix_view(d_type);
  p.trans_a = node.gemm.trans_a;
  p.trans_b = node.gemm.trans_b;
  p.m = p.d.rows;
  p.n = p.d.cols;
  p.k = p.trans_a ? p.a.rows : p.a.cols;
  p.batch = p.d.batch;
  // A rank-2 operand is shared by every matrix of the batch.
  if (a.rank == 2) p.a.batch_stride = 0;
  if (b.rank == 2) p.b.batch_stride = 0;
  if (node.c != kNoValue) {
    p.has_c = true;
    p.c = matrix_view(type_of(node.c));
  }
  if (node.bias != kNoValue) {
    p.has_bias = true;
    p.bias_stride = type_of(node.bias).strides[0];
  }
  p.act = node.act;
  p.alpha = node.gemm.alpha;
  p.beta = node.gemm.beta;
  const Node& b_node = graph.node(node.b);
  p.b_constant = b_node.kind == OpKind::Constant;
  if (const QuantizedData* q = b_node.quantized.get(); q && q->storage == DType::F8E4M3) {
    p.b_e4m3 = true;
    const int n_axis = p.trans_b ? 0 : 1;  // B is [N, K] with trans_b, else [K, N]
    if (q->varies_along(1 - n_axis)) {     // along K
      p.b_scale_block_n = q->block(n_axis);
      p.b_scale_block_k = q->block(1 - n_axis);
    }
  }
  return p;
}

ElementwiseProblem activation_in_place(DType dtype, std::int64_t batch, const MatrixView& view,
                                       Activation act) {
  ElementwiseProblem pass;
  pass.x = TensorType::dense(dtype, 3, {batch, view.rows, view.cols});
  pass.x.strides = {view.batch_stride, view.row_stride, view.col_stride};
  pass.out = pass.x;
  pass.act = act;
  return pass;
}

std::pair<ElementwiseProblem, ValueId> make_elementwise_problem(
    const Graph& graph, ValueId id, const std::vector<TensorType>& storage) {
  const Node& node = graph.node(id);
  auto type_of = [&](ValueId v) -> const TensorType& {
    return storage[static_cast<std::size_t>(v)];
  };
  ElementwiseProblem problem;
  problem.x = type_of(node.x);
  problem.out = type_of(id);
  switch (node.kind) {
    case OpKind::BiasAdd:
      problem.has_bias = true;
      problem.bias_stride = type_of(node.bias).strides[0];
      return {problem, kNoValue};
    case OpKind::Activation:
      problem.act = node.act;
      return {problem, kNoValue};
    case OpKind::Add:
    case OpKind::Mul:
      problem.combine = node.kind == OpKind::Add ? Combine::Add : Combine::Mul;
      problem.x_act = node.act;
      problem.y = broadcast_to(type_of(node.y), problem.x);
      return {problem, node.y};
    case OpKind::GatedMul: {
      // x's two halves along its last dimension, read in place: act(first) * second.
      const int last = problem.x.rank - 1;
      problem.x.shape[last] /= 2;
      problem.y = problem.x;
      problem.y_offset = problem.x.shape[last] * problem.x.strides[last];
      problem.combine = Combine::Mul;
      problem.x_act = node.act;
      return {problem, node.x};
    }
    case OpKind::Input:
    case OpKind::Constant:
    case OpKind::Gemm:
    case OpKind::GemmBiasAct:
      break;
  }
  fail(GE2_ERROR_INTERNAL, "ge2_plan_compile: node {} ({}) has no elementwise step", id,
       op_kind_name(node.kind));
}

}  // namespace ge2
