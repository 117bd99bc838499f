// A graph pass: one small class with one job. Passes append human-readable
// notes to the log that the plan text shows.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.hpp"

namespace ge2 {

struct PassLog {
  std::vector<std::string> notes;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual void run(Graph& graph, PassLog& log) const = 0;
};

// Checks structure: operands refer to earlier nodes of the right kind, at least
// one output, unique input and output names.
class ValidatePass final : public Pass {
 public:
  std::string_view name() const override { return "validate"; }
  void run(Graph& graph, PassLog& log) const override;
};

// Recomputes every node's type from its operands, so a graph is consistent
// whatever built it.
class ShapeInferencePass final : public Pass {
 public:
  std::string_view name() const override { return "shape_inference"; }
  void run(Graph& graph, PassLog& log) const override;
};

// Folds GEMM -> bias add -> activation chains into one GemmBiasAct node where
// the intermediate values have no other use.
class FusionPass final : public Pass {
 public:
  std::string_view name() const override { return "fuse_gemm_bias_act"; }
  void run(Graph& graph, PassLog& log) const override;
};

// Gate and up GEMMs of a gated block, act(x·Wg) ⊙ (x·Wu), that share x and
// have constant weights become one GEMM against [Wg | Wu] (N doubled) followed
// by one gated_mul pass: one weight stream and launch instead of two, and the
// multiply reads one buffer. Notes say why a candidate pair was left alone.
class GateUpConcatPass final : public Pass {
 public:
  std::string_view name() const override { return "concat_gate_up"; }
  void run(Graph& graph, PassLog& log) const override;
};

// Marks nodes that no output depends on as dead. Graph inputs always stay, so a
// plan's interface does not depend on what its outputs use.
class DeadNodePass final : public Pass {
 public:
  std::string_view name() const override { return "dead_node_removal"; }
  void run(Graph& graph, PassLog& log) const override;
};

// The standard pipeline: validate, infer shapes, (fuse, concatenate gate/up), remove dead nodes.
std::vector<std::unique_ptr<Pass>> standard_pipeline(bool fuse);

// Checks what every pass must leave true, as MLIR's verifier does between
// passes: each live node reads only earlier, live nodes, its type is what its
// operands imply, and every output names a live node. A violation is a bug in
// the pass named: GE2_ERROR_INTERNAL with the node and the pass.
void verify_graph(const Graph& graph, std::string_view after_pass);

// What a pipeline run did: each pass's name and notes, in order.
struct PassRecord {
  std::string pass;
  std::vector<std::string> notes;
};
// Runs the standard pipeline on `graph`, verifying it after every pass.
std::vector<PassRecord> run_pipeline(Graph& graph, bool fuse);

}  // namespace ge2
