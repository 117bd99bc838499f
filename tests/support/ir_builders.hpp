// Graphs built directly in the IR, for the white-box tests of the passes and the plan.
#pragma once

#include <utility>

#include "ir/graph.hpp"

namespace ge2::test {

// An input named `name` of type `type`.
inline ValueId add_input(Graph& graph, const char* name, const TensorType& type) {
  Node node;
  node.kind = OpKind::Input;
  node.input_name = name;
  node.type = type;
  return graph.add(std::move(node));
}

// `node` (operands and attributes set) with the type its operands imply.
inline ValueId add_node(Graph& graph, Node node) {
  node.type = infer_node_type(graph, node, "test");
  return graph.add(std::move(node));
}

}  // namespace ge2::test
