#include "core/error.hpp"
#include "passes/pass.hpp"

namespace ge2 {

std::vector<std::unique_ptr<Pass>> standard_pipeline(bool fuse) {
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(std::make_unique<ValidatePass>());
  passes.push_back(std::make_unique<ShapeInferencePass>());
  if (fuse) {
    passes.push_back(std::make_unique<FusionPass>());
    passes.push_back(std::make_unique<GateUpConcatPass>());
  }
  passes.push_back(std::make_unique<DeadNodePass>());
  return passes;
}

void verify_graph(const Graph& graph, std::string_view after_pass) {
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (!node.live) continue;
    const std::string where =
        fmt::format("ge2_plan_compile: internal error after pass '{}': node {} ({})", after_pass,
                    id, op_kind_name(node.kind));
    const OpInfo& info = op_info(node.kind);
    const unsigned roles = operand_roles(node);
    if ((roles & info.required_roles) != info.required_roles || (roles & ~info.allowed_roles) != 0)
      fail(GE2_ERROR_INTERNAL, "{} has operands {} where it needs {} and allows {}", where,
           role_names(roles), role_names(info.required_roles), role_names(info.allowed_roles));
    for (ValueId operand : node.operands()) {
      require(operand >= 0 && operand < id, GE2_ERROR_INTERNAL,
              "{} reads {}, which is not an earlier node", where, operand);
      require(graph.node(operand).live, GE2_ERROR_INTERNAL, "{} reads node {}, which was removed",
              where, operand);
    }
    const TensorType inferred = infer_node_type(graph, node, where);
    require(inferred.dtype == node.type.dtype && inferred.same_shape(node.type), GE2_ERROR_INTERNAL,
            "{} has type {} but its operands imply {}", where, node.type, inferred);
  }
  for (const auto& output : graph.outputs()) {
    require(graph.contains(output.value) && graph.node(output.value).live, GE2_ERROR_INTERNAL,
            "ge2_plan_compile: internal error after pass '{}': output '{}' names node {}, which "
            "does not exist or was removed",
            after_pass, output.name, output.value);
  }
}

std::vector<PassRecord> run_pipeline(Graph& graph, bool fuse) {
  std::vector<PassRecord> records;
  for (const auto& pass : standard_pipeline(fuse)) {
    PassLog log;
    pass->run(graph, log);
    // Validation must see the graph as the caller built it, so the verifier
    // (which assumes a valid graph) runs from the pass after it on.
    if (pass->name() != "validate") verify_graph(graph, pass->name());
    records.push_back({std::string(pass->name()), std::move(log.notes)});
  }
  return records;
}

}  // namespace ge2
