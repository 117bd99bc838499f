// The graph IR: a list of nodes in topological order (every operand refers to an
// earlier node), each producing one value whose id is the node's index.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/activation.hpp"
#include "core/tensor_type.hpp"

namespace ge2 {

using ValueId = int;
inline constexpr ValueId kNoValue = -1;

// Every op of the IR; each has one row in kOps (graph.cpp) with its name,
// operand roles and type rule. GatedMul is made by the gate/up concatenation pass.
enum class OpKind { Input, Constant, Gemm, BiasAdd, Activation, GemmBiasAct, Add, Mul, GatedMul };
inline constexpr int kOpKindCount = 9;

// The operand roles of a node, as bits: which ones an op needs and which it may have.
enum OperandRole : unsigned {
  kRoleA = 1,
  kRoleB = 2,
  kRoleC = 4,
  kRoleX = 8,
  kRoleY = 16,
  kRoleBias = 32
};

const char* op_kind_name(OpKind kind);

struct GemmAttrs {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// A constant given in a quantized storage type (ge2_graph_add_quantized_constant),
// kept beside its dequantized value so that a kernel reading the quantized form
// takes these bytes and scales as given instead of quantizing the value again.
// Its scales tile the matrix in blocks of block_rows x block_cols: element (i, j)
// takes scales[(i / block_rows) * grid_cols() + j / block_cols]. One scale for the
// tensor is the block [rows, cols], one per row [1, cols], one per column [rows, 1].
struct QuantizedData {
  DType storage = DType::F8E4M3;
  std::int64_t rows = 0, cols = 0;
  std::vector<std::uint8_t> data;  // rows x cols, row-major
  std::vector<float> scales;       // grid_rows() x grid_cols(), row-major
  std::int64_t block_rows = 1, block_cols = 1;

  std::int64_t grid_rows() const { return (rows + block_rows - 1) / block_rows; }
  std::int64_t grid_cols() const { return (cols + block_cols - 1) / block_cols; }
  float scale_at(std::int64_t i, std::int64_t j) const {
    return scales[static_cast<std::size_t>((i / block_rows) * grid_cols() + j / block_cols)];
  }
  // The block's extent along `axis` (0: rows, 1: columns), at most the matrix's.
  std::int64_t block(int axis) const;
  // Whether the scales differ from one block to the next along `axis`.
  bool varies_along(int axis) const { return (axis == 0 ? grid_rows() : grid_cols()) > 1; }
  // One scale per index along `along` (0: rows, 1: columns); nullopt when the
  // scales vary along the other axis.
  std::optional<std::vector<float>> scales_along(int along) const;
  // How the scales are laid out, for the plan's text: "one scale", "one scale per
  // row", "one scale per 128x128 block", ...
  std::string scales_text() const;
};

struct Node {
  OpKind kind = OpKind::Input;
  // Operands by role; unused roles hold kNoValue.
  ValueId a = kNoValue, b = kNoValue, c = kNoValue;  // GEMM family
  ValueId x = kNoValue;                              // BiasAdd, Activation, Add, Mul, GatedMul
  ValueId y = kNoValue;                              // Add, Mul (broadcast over x)
  ValueId bias = kNoValue;                           // BiasAdd, GemmBiasAct
  GemmAttrs gemm;
  // Activation, GemmBiasAct: the activation applied last. Mul (set by fusion):
  // the activation applied to x before the multiply, as in silu(gate) * up.
  // GatedMul: out = act(x[..., :n]) * x[..., n:] for x of last dimension 2n.
  Activation act = Activation::None;
  std::string input_name;  // Input and Constant: the name
  // Constant only: the bytes of its span, shared by copies of the graph.
  std::shared_ptr<const std::vector<unsigned char>> constant_data;
  // Constant only: the quantized form it was given in, or null.
  std::shared_ptr<const QuantizedData> quantized;
  TensorType type;                  // the value this node produces
  bool live = true;                 // cleared by dead-node removal
  std::vector<ValueId> fused_from;  // original nodes folded into this one (for the plan text)

  bool is_gemm_family() const { return kind == OpKind::Gemm || kind == OpKind::GemmBiasAct; }
  // Inputs and constants: values given from outside, not computed.
  bool is_source() const { return kind == OpKind::Input || kind == OpKind::Constant; }
  std::vector<ValueId> operands() const;
};

struct GraphOutput {
  ValueId value = kNoValue;
  std::string name;
  std::optional<TensorType> layout;  // caller-given strides; dense row-major when empty
};

class Graph {
 public:
  ValueId add(Node node);  // appends; the caller has inferred node.type
  const Node& node(ValueId id) const { return nodes_.at(static_cast<std::size_t>(id)); }
  Node& node(ValueId id) { return nodes_.at(static_cast<std::size_t>(id)); }
  int size() const { return static_cast<int>(nodes_.size()); }
  bool contains(ValueId id) const { return id >= 0 && id < size(); }

  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  void add_output(GraphOutput output) { outputs_.push_back(std::move(output)); }

  // Number of live nodes using `id` as an operand, plus one per output naming it.
  int use_count(ValueId id) const;

 private:
  std::vector<Node> nodes_;
  std::vector<GraphOutput> outputs_;
};

// Shape and dtype rules of every op: returns the type `node` produces from its
// operands' types, or throws GE2_ERROR_SHAPE_MISMATCH / INVALID_ARGUMENT with a
// message that starts with `where`.
TensorType infer_node_type(const Graph& graph, const Node& node, const std::string& where);

// One row per op: what the validator, the verifier and the plan text read.
struct OpInfo {
  OpKind kind;
  const char* name;
  unsigned required_roles;  // OperandRole bits that must be set
  unsigned allowed_roles;   // bits that may be set (a superset of required_roles)
  TensorType (*infer)(const Graph& graph, const Node& node, const std::string& where);
};
const OpInfo& op_info(OpKind kind);
// The set roles of `node` as OperandRole bits.
unsigned operand_roles(const Node& node);
// "a, b" for kRoleA | kRoleB, as the API names the arguments.
std::string role_names(unsigned roles);

}  // namespace ge2
