#include "ir/graph.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <utility>

#include "core/checked_math.hpp"
#include "core/error.hpp"

namespace ge2 {

std::int64_t QuantizedData::block(int axis) const {
  assert(axis == 0 || axis == 1);
  return axis == 0 ? std::min(block_rows, rows) : std::min(block_cols, cols);
}

std::optional<std::vector<float>> QuantizedData::scales_along(int along) const {
  assert(along == 0 || along == 1);
  assert(static_cast<std::int64_t>(scales.size()) == grid_rows() * grid_cols());
  if (varies_along(1 - along)) return std::nullopt;
  const std::int64_t extent = along == 0 ? rows : cols;
  std::vector<float> each(static_cast<std::size_t>(extent));
  for (std::int64_t i = 0; i < extent; ++i)
    each[static_cast<std::size_t>(i)] = along == 0 ? scale_at(i, 0) : scale_at(0, i);
  return each;
}

std::string QuantizedData::scales_text() const {
  if (grid_rows() == 1 && grid_cols() == 1) return "one scale";
  if (block(0) == 1 && grid_cols() == 1) return "one scale per row";
  if (block(1) == 1 && grid_rows() == 1) return "one scale per column";
  return fmt::format("one scale per {}x{} block", block(0), block(1));
}

std::vector<ValueId> Node::operands() const {
  std::vector<ValueId> ids;
  for (ValueId id : {a, b, c, x, y, bias})
    if (id != kNoValue) ids.push_back(id);
  return ids;
}

ValueId Graph::add(Node node) {
  nodes_.push_back(std::move(node));
  return size() - 1;
}

int Graph::use_count(ValueId id) const {
  int uses = 0;
  for (const auto& node : nodes_) {
    if (!node.live) continue;
    for (ValueId operand : node.operands()) uses += operand == id;
  }
  for (const auto& output : outputs_) uses += output.value == id;
  return uses;
}

namespace {

const TensorType& operand_type(const Graph& graph, ValueId id, const char* role,
                               const std::string& where) {
  require(graph.contains(id), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument '{}': value {} does not exist", where, role, id);
  return graph.node(id).type;
}

void require_same_dtype(const TensorType& x, const TensorType& y, const char* role,
                        const std::string& where) {
  require(x.dtype == y.dtype, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument '{}': dtype {} differs from the first operand's {}", where, role,
          dtype_name(y.dtype), dtype_name(x.dtype));
}

// The dynamic extent stays the leading dimension of every value it reaches: the
// rows of op(A) or the batch. As K or N it would change every row's arithmetic
// (and N the weights), so those uses are refused.
bool gemm_result_is_dynamic(const TensorType& a, const TensorType& b, const GemmAttrs& attrs,
                            const std::string& where) {
  const bool batched = a.rank == 3 || b.rank == 3;
  require(!b.dynamic || b.rank == 3, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'b': {} has a dynamic leading dimension, which is B's {}; only the rows of "
          "op(a) or a batch may be dynamic",
          where, b, attrs.trans_b ? "N" : "K");
  require(!a.dynamic || a.rank == 3 || !attrs.trans_a, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'a': {} is transposed, so its dynamic leading dimension is K; only the "
          "rows of op(a) or a batch may be dynamic",
          where, a);
  require(!a.dynamic || a.rank == 3 || !batched, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'a': the dynamic rows of {} would be dimension 1 of the batched result; "
          "the dynamic extent must stay the leading dimension",
          where, a);
  require(a.rank != 3 || b.rank != 3 || a.dynamic == b.dynamic, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'b': batch of {} and of a {} must both be dynamic or both fixed", where, b,
          a);
  return a.dynamic || b.dynamic;
}

TensorType infer_gemm(const Graph& graph, const Node& node, const std::string& where) {
  const TensorType& a = operand_type(graph, node.a, "a", where);
  const TensorType& b = operand_type(graph, node.b, "b", where);
  require(a.rank >= 2, GE2_ERROR_SHAPE_MISMATCH, "{}: argument 'a': rank {} must be 2 or 3 ({})",
          where, a.rank, a);
  require(b.rank >= 2, GE2_ERROR_SHAPE_MISMATCH, "{}: argument 'b': rank {} must be 2 or 3 ({})",
          where, b.rank, b);
  require_same_dtype(a, b, "b", where);
  const MatrixView av = matrix_view(a), bv = matrix_view(b);
  const std::int64_t m = node.gemm.trans_a ? av.cols : av.rows;
  const std::int64_t k = node.gemm.trans_a ? av.rows : av.cols;
  const std::int64_t kb = node.gemm.trans_b ? bv.cols : bv.rows;
  const std::int64_t n = node.gemm.trans_b ? bv.rows : bv.cols;
  require(k == kb, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'b': K={} does not match A's K={} (a {}{}, b {}{})", where, kb, k, a,
          node.gemm.trans_a ? " transposed" : "", b, node.gemm.trans_b ? " transposed" : "");
  require(a.rank == 2 || b.rank == 2 || av.batch == bv.batch, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'b': batch {} does not match A's batch {}", where, bv.batch, av.batch);
  const std::int64_t batch = a.rank == 3 ? av.batch : bv.batch;
  const bool batched = a.rank == 3 || b.rank == 3;
  // Each operand is within kMaxElements, but batch * M * N need not be.
  if (!bounded_product({batch, m, n}, kMaxElements))
    fail(GE2_ERROR_INVALID_ARGUMENT, "{}: the result [{}{}, {}] {} has more than {} elements",
         where, batched ? fmt::format("{}, ", batch) : "", m, n, dtype_name(a.dtype), kMaxElements);
  TensorType out = batched ? TensorType::dense(a.dtype, 3, {batch, m, n})
                           : TensorType::dense(a.dtype, 2, {m, n, 0});
  out.dynamic = gemm_result_is_dynamic(a, b, node.gemm, where);

  if (node.c != kNoValue) {
    const TensorType& c = operand_type(graph, node.c, "c", where);
    require_same_dtype(a, c, "c", where);
    require(c.same_shape(out), GE2_ERROR_SHAPE_MISMATCH,
            "{}: argument 'c': shape {} differs from the result's {}", where, c, out);
  }
  require(node.c != kNoValue || node.gemm.beta == 0.0f, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'attrs': beta = {} needs a C operand", where, node.gemm.beta);
  if (node.bias != kNoValue) {
    const TensorType& bias = operand_type(graph, node.bias, "bias", where);
    require_same_dtype(a, bias, "bias", where);
    require(bias.rank == 1 && bias.shape[0] == n, GE2_ERROR_SHAPE_MISMATCH,
            "{}: argument 'bias': shape {} must be [{}] (N)", where, bias, n);
  }
  return out;
}

TensorType infer_elementwise(const Graph& graph, const Node& node, const std::string& where) {
  const TensorType& x = operand_type(graph, node.x, "x", where);
  require(x.rank >= 2, GE2_ERROR_SHAPE_MISMATCH, "{}: argument 'x': rank {} must be 2 or 3 ({})",
          where, x.rank, x);
  if (node.kind == OpKind::BiasAdd) {
    const TensorType& bias = operand_type(graph, node.bias, "bias", where);
    require_same_dtype(x, bias, "bias", where);
    const std::int64_t n = x.shape[x.rank - 1];
    require(bias.rank == 1 && bias.shape[0] == n, GE2_ERROR_SHAPE_MISMATCH,
            "{}: argument 'bias': shape {} must be [{}] (x's last dimension)", where, bias, n);
  }
  TensorType out = TensorType::dense(x.dtype, x.rank, x.shape);
  out.dynamic = x.dynamic;
  return out;
}

// out = x (op) y with y's shape a trailing part of x's, broadcast over the rest.
TensorType infer_binary(const Graph& graph, const Node& node, const std::string& where) {
  const TensorType& x = operand_type(graph, node.x, "a", where);
  const TensorType& y = operand_type(graph, node.y, "b", where);
  require(x.rank >= 2, GE2_ERROR_SHAPE_MISMATCH, "{}: argument 'a': rank {} must be 2 or 3 ({})",
          where, x.rank, x);
  require_same_dtype(x, y, "b", where);
  bool trailing = y.rank <= x.rank;
  for (int i = 1; trailing && i <= y.rank; ++i)
    trailing = y.shape[y.rank - i] == x.shape[x.rank - i];
  require(trailing, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'b': shape {} is neither a's shape {} nor a trailing part of it", where, y,
          x);
  // Broadcast over a's leading dimensions, b's own leading dimension is not a's.
  require(y.rank == x.rank ? y.dynamic == x.dynamic : !y.dynamic, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'b': {} and a {} must both have a dynamic leading dimension or neither "
          "(a broadcast b has none)",
          where, y, x);
  TensorType out = TensorType::dense(x.dtype, x.rank, x.shape);
  out.dynamic = x.dynamic;
  return out;
}

// out = act(x[..., :n]) * x[..., n:]: the gate and up halves of one GEMM result.
TensorType infer_gated_mul(const Graph& graph, const Node& node, const std::string& where) {
  const TensorType& x = operand_type(graph, node.x, "x", where);
  require(x.rank >= 2, GE2_ERROR_SHAPE_MISMATCH, "{}: argument 'x': rank {} must be 2 or 3 ({})",
          where, x.rank, x);
  const std::int64_t width = x.shape[x.rank - 1];
  require(width % 2 == 0, GE2_ERROR_SHAPE_MISMATCH,
          "{}: argument 'x': last dimension {} is not even ({})", where, width, x);
  std::array<std::int64_t, 3> shape = x.shape;
  shape[x.rank - 1] = width / 2;
  TensorType out = TensorType::dense(x.dtype, x.rank, shape);
  out.dynamic = x.dynamic;
  return out;
}

TensorType source_type(const Graph&, const Node& node, const std::string&) { return node.type; }

constexpr unsigned kGemmRoles = kRoleA | kRoleB | kRoleC | kRoleBias;

// Indexed by OpKind; the static_asserts below keep rows and enum in step.
constexpr std::array<OpInfo, kOpKindCount> kOps{{
    {OpKind::Input, "input", 0, 0, source_type},
    {OpKind::Constant, "constant", 0, 0, source_type},
    {OpKind::Gemm, "gemm", kRoleA | kRoleB, kGemmRoles, infer_gemm},
    {OpKind::BiasAdd, "bias_add", kRoleX | kRoleBias, kRoleX | kRoleBias, infer_elementwise},
    {OpKind::Activation, "activation", kRoleX, kRoleX, infer_elementwise},
    {OpKind::GemmBiasAct, "gemm_bias_act", kRoleA | kRoleB, kGemmRoles, infer_gemm},
    {OpKind::Add, "add", kRoleX | kRoleY, kRoleX | kRoleY, infer_binary},
    {OpKind::Mul, "mul", kRoleX | kRoleY, kRoleX | kRoleY, infer_binary},
    {OpKind::GatedMul, "gated_mul", kRoleX, kRoleX, infer_gated_mul},
}};

constexpr bool rows_in_enum_order() {
  for (int i = 0; i < kOpKindCount; ++i)
    if (static_cast<int>(kOps[static_cast<std::size_t>(i)].kind) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kOps must list every OpKind once, in enum order");
static_assert(static_cast<int>(OpKind::GatedMul) + 1 == kOpKindCount,
              "kOpKindCount must count every OpKind");

}  // namespace

const OpInfo& op_info(OpKind kind) {
  const auto index = static_cast<std::size_t>(kind);
  assert(index < kOps.size());
  return kOps[index];
}

const char* op_kind_name(OpKind kind) {
  const auto index = static_cast<std::size_t>(kind);
  return index < kOps.size() ? kOps[index].name : "?";
}

unsigned operand_roles(const Node& node) {
  unsigned roles = 0;
  for (const auto& [id, role] :
       {std::pair{node.a, kRoleA}, std::pair{node.b, kRoleB}, std::pair{node.c, kRoleC},
        std::pair{node.x, kRoleX}, std::pair{node.y, kRoleY}, std::pair{node.bias, kRoleBias}})
    if (id != kNoValue) roles |= role;
  return roles;
}

std::string role_names(unsigned roles) {
  std::string names;
  for (const auto& [role, name] :
       {std::pair{kRoleA, "a"}, std::pair{kRoleB, "b"}, std::pair{kRoleC, "c"},
        std::pair{kRoleX, "x"}, std::pair{kRoleY, "y"}, std::pair{kRoleBias, "bias"}}) {
    if ((roles & role) == 0) continue;
    if (!names.empty()) names += ", ";
    names += name;
  }
  return names;
}

TensorType infer_node_type(const Graph& graph, const Node& node, const std::string& where) {
  const auto index = static_cast<std::size_t>(node.kind);
  require(index < kOps.size(), GE2_ERROR_INTERNAL, "{}: unknown op kind {}", where, index);
  return kOps[index].infer(graph, node, where);
}

}  // namespace ge2
