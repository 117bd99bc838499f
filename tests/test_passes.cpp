// Each pass on its own, on graphs built directly in the IR.
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "passes/pass.hpp"
#include "support/ir_builders.hpp"

using namespace ge2;
using ge2::test::add_input;

namespace {

ValueId input(Graph& g, const char* name, std::int64_t rows, std::int64_t cols) {
  return add_input(g, name, TensorType::dense(DType::F16, 2, {rows, cols, 0}));
}
ValueId bias_input(Graph& g, const char* name, std::int64_t n) {
  return add_input(g, name, TensorType::dense(DType::F16, 1, {n, 0, 0}));
}
ValueId op(Graph& g, Node n) { return ge2::test::add_node(g, std::move(n)); }
Node gemm(ValueId a, ValueId b) {
  Node n;
  n.kind = OpKind::Gemm;
  n.a = a;
  n.b = b;
  return n;
}
Node bias_add(ValueId x, ValueId bias) {
  Node n;
  n.kind = OpKind::BiasAdd;
  n.x = x;
  n.bias = bias;
  return n;
}
Node activation(ValueId x, Activation act) {
  Node n;
  n.kind = OpKind::Activation;
  n.x = x;
  n.act = act;
  return n;
}
int live_compute_nodes(const Graph& g) {
  int count = 0;
  for (ValueId id = 0; id < g.size(); ++id)
    count += g.node(id).live && g.node(id).kind != OpKind::Input;
  return count;
}

}  // namespace

TEST_CASE("fusion: GEMM -> bias -> act becomes one node, in order") {
  Graph g;
  const ValueId a = input(g, "a", 8, 16), b = input(g, "b", 16, 4), bias = bias_input(g, "bias", 4);
  const ValueId mm = op(g, gemm(a, b));
  const ValueId biased = op(g, bias_add(mm, bias));
  const ValueId out = op(g, activation(biased, Activation::GeluErf));
  g.add_output({out, "y", std::nullopt});
  PassLog log;
  FusionPass().run(g, log);
  DeadNodePass().run(g, log);
  CHECK(live_compute_nodes(g) == 1);
  const Node& fused = g.node(out);
  CHECK(fused.kind == OpKind::GemmBiasAct);
  CHECK(fused.a == a);
  CHECK(fused.b == b);
  CHECK(fused.bias == bias);
  CHECK(fused.act == Activation::GeluErf);
  CHECK(fused.fused_from == std::vector<ValueId>{mm, biased});
  CHECK(log.notes.size() == 2);
}

TEST_CASE("fusion: an intermediate used elsewhere is not fused") {
  Graph g;
  const ValueId a = input(g, "a", 8, 16), b = input(g, "b", 16, 4), bias = bias_input(g, "bias", 4);
  const ValueId mm = op(g, gemm(a, b));
  const ValueId biased = op(g, bias_add(mm, bias));
  const ValueId relu = op(g, activation(mm, Activation::Relu));  // second use of mm
  g.add_output({biased, "y", std::nullopt});
  g.add_output({relu, "z", std::nullopt});
  PassLog log;
  FusionPass().run(g, log);
  CHECK(log.notes.empty());
  CHECK(g.node(biased).kind == OpKind::BiasAdd);
  CHECK(g.node(mm).live);
}

TEST_CASE("fusion: an output intermediate and bias-after-activation are not fused") {
  Graph g;
  const ValueId a = input(g, "a", 8, 16), b = input(g, "b", 16, 4), bias = bias_input(g, "bias", 4);
  const ValueId mm = op(g, gemm(a, b));
  const ValueId relu = op(g, activation(mm, Activation::Relu));
  const ValueId biased = op(g, bias_add(relu, bias));
  g.add_output({biased, "y", std::nullopt});
  PassLog log;
  FusionPass().run(g, log);
  // mm+relu fuse; the bias after the activation must stay separate.
  CHECK(g.node(relu).kind == OpKind::GemmBiasAct);
  CHECK(g.node(biased).kind == OpKind::BiasAdd);

  Graph g2;
  const ValueId a2 = input(g2, "a", 8, 16), b2 = input(g2, "b", 16, 4);
  const ValueId mm2 = op(g2, gemm(a2, b2));
  const ValueId relu2 = op(g2, activation(mm2, Activation::Relu));
  g2.add_output({mm2, "raw", std::nullopt});
  g2.add_output({relu2, "y", std::nullopt});
  PassLog log2;
  FusionPass().run(g2, log2);
  CHECK(log2.notes.empty());
}

TEST_CASE("dead-node removal keeps what outputs need and every input") {
  Graph g;
  const ValueId a = input(g, "a", 8, 8);
  const ValueId spare = input(g, "spare", 8, 8);
  const ValueId dead = op(g, gemm(a, a));
  const ValueId dead2 = op(g, activation(dead, Activation::Relu));
  const ValueId live = op(g, activation(a, Activation::Relu));
  g.add_output({live, "y", std::nullopt});
  PassLog log;
  DeadNodePass().run(g, log);
  CHECK_FALSE(g.node(dead).live);
  CHECK_FALSE(g.node(dead2).live);
  CHECK(g.node(live).live);
  CHECK(g.node(spare).live);
  CHECK(log.notes.size() == 2);
}

TEST_CASE("validation rejects malformed graphs") {
  Graph g;
  const ValueId a = input(g, "a", 4, 4);
  PassLog log;
  CHECK_THROWS_WITH_AS(ValidatePass().run(g, log), doctest::Contains("no outputs"), Error);
  Node forward = gemm(a, 5);  // operand from the future
  forward.type = g.node(a).type;
  const ValueId bad = g.add(forward);
  g.add_output({bad, "y", std::nullopt});
  CHECK_THROWS_WITH_AS(ValidatePass().run(g, log), doctest::Contains("not an earlier node"), Error);

  Graph dup;
  input(dup, "a", 4, 4);
  const ValueId x = input(dup, "a", 4, 4);
  const ValueId r = op(dup, activation(x, Activation::Relu));
  dup.add_output({r, "y", std::nullopt});
  CHECK_THROWS_WITH_AS(ValidatePass().run(dup, log), doctest::Contains("used twice"), Error);
}

TEST_CASE("shape inference recomputes types and catches inconsistent graphs") {
  Graph g;
  const ValueId a = input(g, "a", 8, 16), b = input(g, "b", 16, 4);
  Node mm = gemm(a, b);  // type deliberately left wrong
  mm.type = TensorType::dense(DType::F16, 2, {1, 1, 0});
  const ValueId d = g.add(mm);
  g.add_output({d, "y", std::nullopt});
  PassLog log;
  ShapeInferencePass().run(g, log);
  CHECK(g.node(d).type.shape[0] == 8);
  CHECK(g.node(d).type.shape[1] == 4);
  g.node(b).type = TensorType::dense(DType::F16, 2, {15, 4, 0});
  CHECK_THROWS_WITH_AS(ShapeInferencePass().run(g, log), doctest::Contains("K=15"), Error);
}

TEST_CASE("verifier: runs after every pass and names the pass that broke an invariant") {
  Graph g;
  const ValueId a = input(g, "a", 8, 16), b = input(g, "b", 16, 4);
  const ValueId d = op(g, gemm(a, b));
  const ValueId y = op(g, activation(d, Activation::Relu));
  g.add_output({y, "y", std::nullopt});
  verify_graph(g, "none");  // a consistent graph passes

  Graph reads_removed = g;
  reads_removed.node(d).live = false;  // as a faulty fusion would leave it
  CHECK_THROWS_WITH_AS(verify_graph(reads_removed, "fuse_gemm_bias_act"),
                       doctest::Contains("after pass 'fuse_gemm_bias_act': node 3 (activation) "
                                         "reads node 2, which was removed"),
                       Error);
  Graph wrong_type = g;
  wrong_type.node(y).type = TensorType::dense(DType::F16, 2, {8, 5, 0});
  CHECK_THROWS_WITH_AS(verify_graph(wrong_type, "x"),
                       doctest::Contains("has type [8, 5] f16 but its operands imply [8, 4] f16"),
                       Error);
  Graph dead_output = g;
  dead_output.node(y).live = false;
  try {
    verify_graph(dead_output, "dead_node_removal");
    FAIL("a dead output passed the verifier");
  } catch (const Error& e) {
    CHECK(e.status() == GE2_ERROR_INTERNAL);
    CHECK(std::string(e.what()).find("output 'y' names node 3") != std::string::npos);
  }

  Graph piped = g;
  const auto records = run_pipeline(piped, true);
  REQUIRE(records.size() == 5);
  CHECK(records[0].pass == "validate");
  CHECK(records[2].pass == "fuse_gemm_bias_act");
  CHECK(records[2].notes.size() == 1);
  CHECK(records[3].pass == "concat_gate_up");
  CHECK(records[4].pass == "dead_node_removal");
}

namespace {

// A rank-2 f16 constant whose bytes count up from `first`, so a join is checkable byte by byte.
ValueId counting_constant(Graph& g, const char* name, std::int64_t rows, std::int64_t cols,
                          unsigned char first) {
  Node n;
  n.kind = OpKind::Constant;
  n.input_name = name;
  n.type = TensorType::dense(DType::F16, 2, {rows, cols, 0});
  auto bytes = std::make_shared<std::vector<unsigned char>>(n.type.span_bytes());
  for (std::size_t i = 0; i < bytes->size(); ++i)
    (*bytes)[i] = static_cast<unsigned char>(first + i);
  n.constant_data = bytes;
  return g.add(n);
}
Node mul(ValueId x, ValueId y) {
  Node n;
  n.kind = OpKind::Mul;
  n.x = x;
  n.y = y;
  return n;
}

}  // namespace

TEST_CASE("concat_gate_up: joins the weights along N in either layout, byte for byte") {
  for (bool trans_b : {true, false}) {
    CAPTURE(trans_b);
    Graph g;
    const ValueId x = input(g, "x", 4, 3);
    // nn.Linear layout [N, K] = [2, 3]; else [K, N] = [3, 2].
    const ValueId wg = counting_constant(g, "wg", trans_b ? 2 : 3, trans_b ? 3 : 2, 0);
    const ValueId wu = counting_constant(g, "wu", trans_b ? 2 : 3, trans_b ? 3 : 2, 100);
    Node gate_node = gemm(x, wg), up_node = gemm(x, wu);
    gate_node.gemm.trans_b = up_node.gemm.trans_b = trans_b;
    const ValueId gate = op(g, gate_node), up = op(g, up_node);
    const ValueId act = op(g, activation(gate, Activation::Silu));
    const ValueId y = op(g, mul(act, up));
    g.add_output({y, "y", std::nullopt});
    const auto records = run_pipeline(g, true);

    CHECK(g.node(y).kind == OpKind::GatedMul);
    CHECK(g.node(y).x == gate);
    CHECK(g.node(y).act == Activation::Silu);
    CHECK_FALSE(g.node(up).live);
    CHECK_FALSE(g.node(wu).live);
    CHECK(g.node(gate).type.shape_string() == "[4, 4] f16");
    const Node& joined = g.node(wg);
    CHECK(joined.input_name == "wg+wu");
    std::vector<unsigned char> expected;
    const int row_bytes = 2 * (trans_b ? 3 : 2);
    if (trans_b) {  // rows of Wg, then rows of Wu
      for (int i = 0; i < 12; ++i) expected.push_back(static_cast<unsigned char>(i));
      for (int i = 0; i < 12; ++i) expected.push_back(static_cast<unsigned char>(100 + i));
    } else {  // each row of Wg followed by the same row of Wu
      for (int r = 0; r < 3; ++r) {
        for (int i = 0; i < row_bytes; ++i)
          expected.push_back(static_cast<unsigned char>(r * row_bytes + i));
        for (int i = 0; i < row_bytes; ++i)
          expected.push_back(static_cast<unsigned char>(100 + r * row_bytes + i));
      }
    }
    CHECK(*joined.constant_data == expected);
    CHECK(joined.type.shape_string() == (trans_b ? "[4, 3] f16" : "[3, 4] f16"));
    CHECK(records[3].notes.size() == 1);
  }
}

TEST_CASE(
    "concat_gate_up: a weight with another reader or an input weight stays apart, with a note") {
  Graph g;
  const ValueId x = input(g, "x", 4, 3);
  const ValueId wg = counting_constant(g, "wg", 3, 2, 0);
  const ValueId wu = counting_constant(g, "wu", 3, 2, 50);
  const ValueId gate = op(g, gemm(x, wg)), up = op(g, gemm(x, wu));
  const ValueId y = op(g, mul(gate, up));
  const ValueId other = op(g, gemm(x, wu));  // a second reader of Wu
  g.add_output({y, "y", std::nullopt});
  g.add_output({other, "other", std::nullopt});
  const auto records = run_pipeline(g, true);
  CHECK(g.node(y).kind == OpKind::Mul);
  CHECK(g.node(up).live);
  CHECK(g.node(wg).constant_data->size() == 12);
  REQUIRE(records[3].notes.size() == 1);
  CHECK(records[3].notes[0] ==
        "gemm #3 and gemm #4 (mul #5) not concatenated: weight #2 has other readers");

  Graph inputs;
  const ValueId ix = input(inputs, "x", 4, 3);
  const ValueId ig = input(inputs, "wg", 3, 2), iu = input(inputs, "wu", 3, 2);
  const ValueId iy = op(inputs, mul(op(inputs, gemm(ix, ig)), op(inputs, gemm(ix, iu))));
  inputs.add_output({iy, "y", std::nullopt});
  const auto input_records = run_pipeline(inputs, true);
  REQUIRE(input_records[3].notes.size() == 1);
  CHECK(input_records[3].notes[0].find("weight #1 is a graph input, not a constant") !=
        std::string::npos);
}

TEST_CASE("verifier: operand roles follow the op table") {
  Graph g;
  const ValueId x = input(g, "x", 4, 6);
  Node gated;
  gated.kind = OpKind::GatedMul;
  gated.x = x;
  const ValueId y = op(g, gated);
  CHECK(g.node(y).type.shape_string() == "[4, 3] f16");
  g.add_output({y, "y", std::nullopt});
  verify_graph(g, "none");
  Graph extra = g;
  extra.node(y).y = x;
  CHECK_THROWS_WITH_AS(verify_graph(extra, "p"),
                       doctest::Contains("has operands x, y where it needs x and allows x"), Error);
  Node odd;
  odd.kind = OpKind::GatedMul;
  odd.x = input(g, "z", 4, 5);
  CHECK_THROWS_WITH_AS(infer_node_type(g, odd, "here"),
                       doctest::Contains("here: argument 'x': last dimension 5 is not even"),
                       Error);
}
