#include "core/error.hpp"
#include "passes/pass.hpp"

namespace ge2 {
namespace {

// The producer of `consumer.x` if it is a GEMM whose result nothing else reads.
Node* sole_use_gemm_producer(Graph& graph, const Node& consumer) {
  Node& producer = graph.node(consumer.x);
  if (!producer.live || !producer.is_gemm_family()) return nullptr;
  if (graph.use_count(consumer.x) != 1) return nullptr;
  return &producer;
}

// Moves the GEMM of `producer` into `consumer`, which becomes the fused node.
void absorb_gemm(Node& consumer, Node& producer, ValueId producer_id) {
  consumer.fused_from = producer.fused_from;
  consumer.fused_from.push_back(producer_id);
  consumer.a = producer.a;
  consumer.b = producer.b;
  consumer.c = producer.c;
  consumer.gemm = producer.gemm;
  if (consumer.kind != OpKind::BiasAdd) consumer.bias = producer.bias;  // a bias add keeps its own
  if (consumer.kind == OpKind::BiasAdd) consumer.act = Activation::None;
  consumer.x = kNoValue;
  consumer.kind = OpKind::GemmBiasAct;
  producer.live = false;
}

// For out = a + b: the operand that is a GEMM without activation and without C,
// read only here, whose result the other operand matches in dtype and shape
// (no broadcast). Its GEMM can take the other operand as C with beta = 1:
// D = alpha*AB + bias + residual in one cuBLASLt epilogue.
ValueId residual_gemm_operand(Graph& graph, const Node& add) {
  for (const auto& [gemm_id, residual] : {std::pair{add.x, add.y}, std::pair{add.y, add.x}}) {
    const Node& gemm = graph.node(gemm_id);
    if (!gemm.live || !gemm.is_gemm_family() || gemm.act != Activation::None ||
        gemm.c != kNoValue || graph.use_count(gemm_id) != 1 || residual == gemm_id)
      continue;
    const TensorType& r = graph.node(residual).type;
    if (r.dtype == gemm.type.dtype && r.same_shape(gemm.type)) return gemm_id;
  }
  return kNoValue;
}

// The one live node reading `id`, or kNoValue (several readers, or an output).
ValueId sole_consumer(const Graph& graph, ValueId id) {
  if (graph.use_count(id) != 1) return kNoValue;
  for (const auto& output : graph.outputs())
    if (output.value == id) return kNoValue;
  for (ValueId user = id + 1; user < graph.size(); ++user) {
    const Node& node = graph.node(user);
    if (!node.live) continue;
    for (ValueId operand : node.operands())
      if (operand == id) return user;
  }
  return kNoValue;
}

// An activation cuBLASLt cannot compute in its epilogue (erf GELU, SiLU) feeding
// only a multiply, as in silu(gate) * up: applied inside the multiply's pass it
// costs nothing, where fused into the GEMM it costs a pass over the GEMM's result.
bool feeds_a_multiply(const Graph& graph, ValueId id, const Node& activation) {
  if (activation_info(activation.act).cublaslt != LtEpilogue::kNone) return false;
  const ValueId user = sole_consumer(graph, id);
  return user != kNoValue && graph.node(user).kind == OpKind::Mul &&
         graph.node(user).act == Activation::None;
}

}  // namespace

void FusionPass::run(Graph& graph, PassLog& log) const {
  // Nodes are in topological order, so a chain GEMM -> bias -> act folds left to right.
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node& node = graph.node(id);
    if (!node.live) continue;
    if (node.kind == OpKind::BiasAdd) {
      Node* gemm = sole_use_gemm_producer(graph, node);
      // A bias after an activation is not the epilogue's order; leave it alone.
      if (gemm == nullptr || gemm->bias != kNoValue || gemm->act != Activation::None) continue;
      log.notes.push_back(fmt::format("fused {} #{} + bias_add #{} into gemm_bias_act #{}",
                                      op_kind_name(gemm->kind), node.x, id, id));
      absorb_gemm(node, *gemm, node.x);
    } else if (node.kind == OpKind::Activation) {
      Node* gemm = sole_use_gemm_producer(graph, node);
      if (gemm == nullptr || gemm->act != Activation::None || feeds_a_multiply(graph, id, node))
        continue;
      log.notes.push_back(fmt::format("fused {} #{} + {} #{} into gemm_bias_act #{}",
                                      op_kind_name(gemm->kind), node.x, activation_name(node.act),
                                      id, id));
      absorb_gemm(node, *gemm, node.x);
    } else if (node.kind == OpKind::Add) {
      const ValueId gemm_id = residual_gemm_operand(graph, node);
      if (gemm_id == kNoValue) continue;
      const ValueId residual = node.x == gemm_id ? node.y : node.x;
      Node& gemm = graph.node(gemm_id);
      log.notes.push_back(
          fmt::format("fused {} #{} + add #{} into gemm_bias_act #{} (residual #{} as C, beta 1)",
                      op_kind_name(gemm.kind), gemm_id, id, id, residual));
      node.y = kNoValue;
      absorb_gemm(node, gemm, gemm_id);
      node.c = residual;
      node.gemm.beta = 1.0f;
    } else if (node.kind == OpKind::Mul && node.act == Activation::None) {
      // act(a) * b or a * act(b): the activation moves into the multiply's pass,
      // applied to its first operand (a multiply commutes).
      for (const bool second : {false, true}) {
        const ValueId activation_id = second ? node.y : node.x;
        Node& producer = graph.node(activation_id);
        if (!producer.live || producer.kind != OpKind::Activation ||
            !feeds_a_multiply(graph, activation_id, producer))
          continue;
        // Only equal shapes may swap: the second operand is the one broadcast.
        if (second && !graph.node(node.x).type.same_shape(graph.node(node.y).type)) continue;
        log.notes.push_back(fmt::format("fused {} #{} into mul #{} (applied to its input)",
                                        activation_name(producer.act), activation_id, id));
        if (second) std::swap(node.x, node.y);
        node.x = producer.x;
        node.act = producer.act;
        node.fused_from.push_back(activation_id);
        producer.live = false;
        break;
      }
    }
  }
}

}  // namespace ge2
