#include <vector>

#include "core/error.hpp"
#include "passes/pass.hpp"

namespace ge2 {

void DeadNodePass::run(Graph& graph, PassLog& log) const {
  std::vector<bool> needed(static_cast<std::size_t>(graph.size()), false);
  for (const auto& output : graph.outputs()) needed[static_cast<std::size_t>(output.value)] = true;
  // Operands precede their users, so one backward sweep reaches everything.
  for (ValueId id = graph.size() - 1; id >= 0; --id) {
    const Node& node = graph.node(id);
    if (!needed[static_cast<std::size_t>(id)] || !node.live) continue;
    for (ValueId operand : node.operands()) needed[static_cast<std::size_t>(operand)] = true;
  }
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node& node = graph.node(id);
    if (node.kind == OpKind::Input || !node.live || needed[static_cast<std::size_t>(id)]) continue;
    node.live = false;
    log.notes.push_back(fmt::format("removed dead {} #{}", op_kind_name(node.kind), id));
  }
}

}  // namespace ge2
