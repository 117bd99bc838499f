#include <cstring>
#include <optional>

#include "core/error.hpp"
#include "passes/pass.hpp"

namespace ge2 {
namespace {

// The concatenation [p | q] of two dense row-major tensors of `rows` rows (1 for
// rank 1) along `axis` (0: rows, 1: columns), whatever their element size.
template <typename Bytes>
Bytes concatenate(const Bytes& p, const Bytes& q, std::int64_t rows, int axis) {
  Bytes joined;
  joined.reserve(p.size() + q.size());
  if (axis == 0) {
    joined.insert(joined.end(), p.begin(), p.end());
    joined.insert(joined.end(), q.begin(), q.end());
    return joined;
  }
  const std::size_t p_row = p.size() / static_cast<std::size_t>(rows);
  const std::size_t q_row = q.size() / static_cast<std::size_t>(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = static_cast<std::size_t>(r);
    joined.insert(joined.end(), p.begin() + static_cast<std::ptrdiff_t>(row * p_row),
                  p.begin() + static_cast<std::ptrdiff_t>((row + 1) * p_row));
    joined.insert(joined.end(), q.begin() + static_cast<std::ptrdiff_t>(row * q_row),
                  q.begin() + static_cast<std::ptrdiff_t>((row + 1) * q_row));
  }
  return joined;
}

// The quantized form of [first | second] along `axis`, or null when one was not
// given quantized or their scale grids cannot be joined (the joined value is then
// a plain constant: kernels read its dequantized value). Grids of one block shape
// join when the first half ends on a block boundary; otherwise scales that vary
// along `axis` only join as one scale per index.
std::shared_ptr<const QuantizedData> join_quantized(const Node& first, const Node& second,
                                                    int axis) {
  if (!first.quantized || !second.quantized) return nullptr;
  const QuantizedData& p = *first.quantized;
  const QuantizedData& q = *second.quantized;
  auto joined = std::make_shared<QuantizedData>();
  joined->storage = p.storage;
  joined->rows = axis == 0 ? p.rows + q.rows : p.rows;
  joined->cols = axis == 0 ? p.cols : p.cols + q.cols;
  joined->data = concatenate(p.data, q.data, p.rows, axis);
  const std::int64_t p_extent = axis == 0 ? p.rows : p.cols;
  if (p.block(0) == q.block(0) && p.block(1) == q.block(1) && p_extent % p.block(axis) == 0) {
    joined->block_rows = p.block(0);
    joined->block_cols = p.block(1);
    joined->scales = concatenate(p.scales, q.scales, p.grid_rows(), axis);
    return joined;
  }
  const auto p_scales = p.scales_along(axis);
  const auto q_scales = q.scales_along(axis);
  if (!p_scales || !q_scales) return nullptr;
  joined->block_rows = axis == 0 ? 1 : joined->rows;
  joined->block_cols = axis == 0 ? joined->cols : 1;
  joined->scales = concatenate(*p_scales, *q_scales, 1, 0);
  return joined;
}

bool is_dense(const TensorType& type) {
  const TensorType dense = TensorType::dense(type.dtype, type.rank, type.shape);
  for (int i = 0; i < type.rank; ++i)
    if (type.shape[i] > 1 && type.strides[i] != dense.strides[i]) return false;
  return true;
}

// Why the weight (or bias) `id` cannot be joined with its partner, or "".
std::string unjoinable(const Graph& graph, ValueId id, int rank, const char* role) {
  const Node& node = graph.node(id);
  if (node.kind != OpKind::Constant)
    return fmt::format("{} #{} is a graph input, not a constant", role, id);
  if (node.type.rank != rank) return fmt::format("{} #{} has rank {}", role, id, node.type.rank);
  if (!is_dense(node.type)) return fmt::format("{} #{} is strided", role, id);
  if (graph.use_count(id) != 1) return fmt::format("{} #{} has other readers", role, id);
  return "";
}

// Why the GEMMs `gate` and `up`, both read only by `mul`, cannot become one, or "".
std::string why_not(const Graph& graph, ValueId gate_id, ValueId up_id) {
  const Node& gate = graph.node(gate_id);
  const Node& up = graph.node(up_id);
  if (graph.use_count(gate_id) != 1 || graph.use_count(up_id) != 1)
    return "a GEMM result has other readers";
  if (gate.c != kNoValue || up.c != kNoValue) return "a GEMM has a C operand";
  if (gate.gemm.trans_a != up.gemm.trans_a || gate.gemm.trans_b != up.gemm.trans_b ||
      gate.gemm.alpha != up.gemm.alpha)
    return "the GEMMs differ in transposes or alpha";
  if (!graph.node(gate.b).type.same_shape(graph.node(up.b).type))
    return "the weights differ in shape";
  for (const auto& [id, role] : {std::pair{gate.b, "weight"}, std::pair{up.b, "weight"}})
    if (auto why = unjoinable(graph, id, 2, role); !why.empty()) return why;
  if ((gate.bias == kNoValue) != (up.bias == kNoValue)) return "only one GEMM has a bias";
  if (gate.bias != kNoValue)
    for (const ValueId id : {gate.bias, up.bias})
      if (auto why = unjoinable(graph, id, 1, "bias"); !why.empty()) return why;
  return "";
}

// Replaces constant `into` by [into | other] along `axis`; `other` is left for dead-node removal.
void join_constants(Graph& graph, ValueId into, ValueId other, int axis) {
  Node& node = graph.node(into);
  const Node& second = graph.node(other);
  node.constant_data = std::make_shared<const std::vector<unsigned char>>(
      concatenate(*node.constant_data, *second.constant_data,
                  node.type.rank == 2 ? node.type.shape[0] : 1, axis));
  node.quantized = node.type.rank == 2 ? join_quantized(node, second, axis) : nullptr;
  std::array<std::int64_t, 3> shape = node.type.shape;
  shape[axis] += second.type.shape[axis];
  node.type = TensorType::dense(node.type.dtype, node.type.rank, shape);
  node.input_name = fmt::format("{}+{}", node.input_name, second.input_name);
}

}  // namespace

void GateUpConcatPass::run(Graph& graph, PassLog& log) const {
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node& mul = graph.node(id);
    if (!mul.live || mul.kind != OpKind::Mul) continue;
    ValueId gate_id = mul.x, up_id = mul.y;
    if (gate_id == up_id || !graph.node(gate_id).is_gemm_family() ||
        !graph.node(up_id).is_gemm_family() || graph.node(gate_id).a != graph.node(up_id).a)
      continue;
    // At most one activation among the three places fusion may have put it; it
    // moves into the gated pass, applied to the gate half.
    const Activation up_act = graph.node(up_id).act;
    if (mul.act == Activation::None && graph.node(gate_id).act == Activation::None &&
        up_act != Activation::None)
      std::swap(gate_id, up_id);
    Node& gate = graph.node(gate_id);
    Node& up = graph.node(up_id);
    const int activations = (mul.act != Activation::None) + (gate.act != Activation::None) +
                            (up.act != Activation::None);
    std::string why =
        activations > 1 ? "both halves have an activation" : why_not(graph, gate_id, up_id);
    if (!why.empty()) {
      log.notes.push_back(fmt::format("gemm #{} and gemm #{} (mul #{}) not concatenated: {}",
                                      gate_id, up_id, id, why));
      continue;
    }
    const Activation act = mul.act != Activation::None ? mul.act : gate.act;
    // B is [K, N] or, transposed (nn.Linear's [out, in]), [N, K]: N grows along
    // columns or rows. Bias is [N].
    const bool any_quantized = graph.node(gate.b).quantized || graph.node(up.b).quantized;
    join_constants(graph, gate.b, up.b, gate.gemm.trans_b ? 0 : 1);
    if (any_quantized && !graph.node(gate.b).quantized)
      log.notes.push_back(fmt::format(
          "the joined weight #{} has no quantized form (one half was not given quantized, or "
          "the halves' scales vary along K in blocks that do not line up): its kernels read "
          "the dequantized value",
          gate.b));
    if (gate.bias != kNoValue) join_constants(graph, gate.bias, up.bias, 0);
    log.notes.push_back(fmt::format(
        "concatenated gemm #{} and gemm #{} (shared A #{}, constant weights) into gemm #{} of "
        "twice the width; mul #{} became gated_mul({})",
        gate_id, up_id, gate.a, gate_id, id, activation_name(act)));
    gate.act = Activation::None;
    gate.fused_from.push_back(up_id);
    gate.type = infer_node_type(graph, gate, fmt::format("concat_gate_up: node {}", gate_id));
    up.live = false;
    mul.kind = OpKind::GatedMul;
    mul.x = gate_id;
    mul.y = kNoValue;
    mul.act = act;
  }
}

}  // namespace ge2
