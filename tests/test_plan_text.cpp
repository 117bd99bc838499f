// The plan text is built only where it can be read: a plan compiled without it
// (a one-shot call's) has the same steps and results, and checks that pass
// format no message.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "exec/backend.hpp"
#include "exec/plan.hpp"
#include "ir/kernel_problems.hpp"
#include "support/ir_builders.hpp"

using namespace ge2;

namespace {

// y = gelu(x w + bias) + r: a GEMM with a fused epilogue and an elementwise add.
Graph block_graph() {
  Graph g;
  Node gemm;
  gemm.kind = OpKind::GemmBiasAct;
  gemm.a = test::add_input(g, "x", TensorType::dense(DType::F32, 2, {5, 7, 0}));
  gemm.b = test::add_input(g, "w", TensorType::dense(DType::F32, 2, {7, 3, 0}));
  gemm.bias = test::add_input(g, "bias", TensorType::dense(DType::F32, 1, {3, 0, 0}));
  gemm.act = Activation::GeluErf;
  Node add;
  add.kind = OpKind::Add;
  add.y = test::add_input(g, "r", TensorType::dense(DType::F32, 2, {5, 3, 0}));
  add.x = test::add_node(g, gemm);
  g.add_output({test::add_node(g, add), "y", std::nullopt});
  return g;
}

std::vector<float> run(Plan& plan, const std::vector<std::vector<float>>& inputs) {
  std::vector<float> y(15, std::numeric_limits<float>::quiet_NaN());  // poisoned
  const char* names[] = {"x", "w", "bias", "r"};
  std::vector<ge2_binding_t> bindings;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    bindings.push_back({names[i], const_cast<float*>(inputs[i].data())});
  bindings.push_back({"y", y.data()});
  plan.execute(bindings.data(), bindings.size(), nullptr);
  return y;
}

}  // namespace

TEST_CASE("a plan compiled without its text runs the same steps with the same results") {
  std::mt19937 rng(20261204);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> inputs{std::vector<float>(35), std::vector<float>(21),
                                         std::vector<float>(3), std::vector<float>(15)};
  for (auto& input : inputs)
    for (float& value : input) value = normal(rng);

  std::shared_ptr<Backend> backend = make_cpu_backend();
  const auto described = compile_plan(backend, block_graph(), CompileOptions{});
  CompileOptions quiet;
  quiet.describe = false;
  const auto silent = compile_plan(backend, block_graph(), quiet);

  CHECK(silent->description().empty());
  const auto text = nlohmann::json::parse(described->description());
  CHECK(text["steps"].size() == 2);  // the GEMM with its epilogue, then the add
  CHECK(text["steps"][0]["problem"]["m"] == 5);

  const std::vector<float> expected = run(*described, inputs);
  const std::vector<float> got = run(*silent, inputs);
  // fp64 reference of one element, so the comparison is not of two wrong results.
  double acc = inputs[2][1];
  for (int k = 0; k < 7; ++k) acc += double{inputs[0][2 * 7 + k]} * inputs[1][k * 3 + 1];
  const double gelu = 0.5 * acc * (1.0 + std::erf(acc / std::sqrt(2.0)));
  CHECK(expected[2 * 3 + 1] == doctest::Approx(gelu + inputs[3][2 * 3 + 1]).epsilon(1e-5));
  CHECK(std::memcmp(expected.data(), got.data(), expected.size() * sizeof(float)) == 0);
}

TEST_CASE("shapes in check messages are formatted when the check fails") {
  TensorType type = TensorType::dense(DType::F16, 2, {4, 128, 0});
  type.dynamic = true;
  CHECK(fmt::format("{}", type) == type.shape_string());
  CHECK(fmt::format("{}", type) == "[1..4, 128] f16");
  GemmProblem problem;
  problem.m = 2;
  problem.n = 3;
  problem.k = 5;
  problem.batch = 7;
  CHECK(fmt::format("{}", problem) == "7x2x3x5");
  CHECK_THROWS_WITH_AS(require(false, GE2_ERROR_SHAPE_MISMATCH, "got {} for {}", type, problem),
                       "got [1..4, 128] f16 for 7x2x3x5", Error);
}
