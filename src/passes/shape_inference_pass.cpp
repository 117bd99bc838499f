#include "core/error.hpp"
#include "passes/pass.hpp"

namespace ge2 {

void ShapeInferencePass::run(Graph& graph, PassLog&) const {
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node& node = graph.node(id);
    if (!node.live) continue;
    node.type = infer_node_type(
        graph, node, fmt::format("shape_inference: node {} ({})", id, op_kind_name(node.kind)));
  }
  for (const auto& output : graph.outputs()) {
    if (!output.layout) continue;
    const TensorType& type = graph.node(output.value).type;
    require(output.layout->dtype == type.dtype && output.layout->same_shape(type),
            GE2_ERROR_SHAPE_MISMATCH,
            "shape_inference: output '{}': layout {} differs from the value's {}", output.name,
            *output.layout, type);
  }
}

}  // namespace ge2
