#include <set>

#include "core/error.hpp"
#include "passes/pass.hpp"

namespace ge2 {

void ValidatePass::run(Graph& graph, PassLog&) const {
  std::set<std::string> names;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    const std::string where = fmt::format("validate: node {} ({})", id, op_kind_name(node.kind));
    for (ValueId operand : node.operands()) {
      require(operand >= 0 && operand < id, GE2_ERROR_INVALID_ARGUMENT,
              "{}: operand {} is not an earlier node", where, operand);
    }
    const OpInfo& info = op_info(node.kind);
    const unsigned roles = operand_roles(node);
    // role_names builds a string: only for the message.
    if ((roles & info.required_roles) != info.required_roles)
      fail(GE2_ERROR_INVALID_ARGUMENT, "{}: a {} needs operands {} but has {}", where, info.name,
           role_names(info.required_roles), roles == 0 ? "none" : role_names(roles));
    if ((roles & ~info.allowed_roles) != 0)
      fail(GE2_ERROR_INVALID_ARGUMENT, "{}: a {} takes no operand {}", where, info.name,
           role_names(roles & ~info.allowed_roles));
    if (node.is_source()) {
      require(!node.input_name.empty(), GE2_ERROR_INVALID_ARGUMENT, "{}: {} has no name", where,
              info.name);
      require(names.insert(node.input_name).second, GE2_ERROR_INVALID_ARGUMENT,
              "{}: name '{}' is used twice", where, node.input_name);
      require(node.kind == OpKind::Input ||
                  (node.constant_data && node.constant_data->size() == node.type.span_bytes()),
              GE2_ERROR_INTERNAL, "{}: constant '{}' holds {} bytes for a {}-byte span", where,
              node.input_name, node.constant_data ? node.constant_data->size() : 0,
              node.type.span_bytes());
    }
    require(is_valid_activation(static_cast<int>(node.act)), GE2_ERROR_INVALID_ARGUMENT,
            "{}: unknown activation {}", where, static_cast<int>(node.act));
  }
  require(!graph.outputs().empty(), GE2_ERROR_INVALID_ARGUMENT,
          "validate: the graph has no outputs (call ge2_graph_mark_output)");
  for (const auto& output : graph.outputs()) {
    require(graph.contains(output.value), GE2_ERROR_INVALID_ARGUMENT,
            "validate: output '{}' names value {}, which does not exist", output.name,
            output.value);
    require(!graph.node(output.value).is_source(), GE2_ERROR_UNSUPPORTED,
            "validate: output '{}' is the graph {} '{}'; ge2 does not copy inputs or constants "
            "to outputs",
            output.name, op_kind_name(graph.node(output.value).kind),
            graph.node(output.value).input_name);
    require(names.insert(output.name).second, GE2_ERROR_INVALID_ARGUMENT,
            "validate: name '{}' is used twice", output.name);
  }
}

}  // namespace ge2
