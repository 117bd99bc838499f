// The C++ sample: RAII owners around ge2's C handles, one fused layer on the
// backend the context picks, checked against a double-precision loop.
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <ge_v2_api.h>

namespace {

void check(ge2_status_t status) {
  if (status != GE2_OK)
    throw std::runtime_error(std::string(ge2_status_string(status)) + ": " + ge2_last_error());
}

struct ContextDeleter {
  void operator()(ge2_context_t* c) const { ge2_context_destroy(c); }
};
struct GraphDeleter {
  void operator()(ge2_graph_t* g) const { ge2_graph_destroy(g); }
};
struct PlanDeleter {
  void operator()(ge2_plan_t* p) const { ge2_plan_destroy(p); }
};

}  // namespace

int main() try {
  ge2_context_options_t options;
  check(ge2_context_options_init(&options));
  options.device = GE2_DEVICE_CPU;  // host arrays below; the CPU backend runs anywhere
  options.tunedb_path = "";
  ge2_context_t* raw_context = nullptr;
  check(ge2_context_create(GE2_API_VERSION, &options, &raw_context));
  std::unique_ptr<ge2_context_t, ContextDeleter> context(raw_context);

  constexpr std::int64_t m = 32, n = 24, k = 40;
  ge2_graph_t* raw_graph = nullptr;
  check(ge2_graph_create(&raw_graph));
  std::unique_ptr<ge2_graph_t, GraphDeleter> graph(raw_graph);
  ge2_tensor_desc_t dx{GE2_DTYPE_F32, 2, {m, k}, {}}, dw{GE2_DTYPE_F32, 2, {k, n}, {}},
      db{GE2_DTYPE_F32, 1, {n}, {}};
  ge2_value_t x, w, b, y;
  check(ge2_graph_add_input(graph.get(), "x", &dx, &x));
  check(ge2_graph_add_input(graph.get(), "w", &dw, &w));
  check(ge2_graph_add_input(graph.get(), "b", &db, &b));
  check(ge2_graph_add_gemm_bias_act(graph.get(), x, w, b, nullptr, GE2_ACT_GELU_ERF, &y));
  check(ge2_graph_mark_output(graph.get(), y, "y", nullptr));
  ge2_plan_t* raw_plan = nullptr;
  check(ge2_plan_compile(context.get(), graph.get(), nullptr, &raw_plan));
  std::unique_ptr<ge2_plan_t, PlanDeleter> plan(raw_plan);

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> hx(m * k), hw(k * n), hb(n), hy(m * n, NAN);
  for (auto* v : {&hx, &hw, &hb})
    for (float& e : *v) e = dist(rng);
  ge2_binding_t bindings[] = {
      {"x", hx.data()}, {"w", hw.data()}, {"b", hb.data()}, {"y", hy.data()}};
  check(ge2_plan_execute(plan.get(), bindings, 4, nullptr));

  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = hb[j];
      for (std::int64_t kk = 0; kk < k; ++kk) acc += double(hx[i * k + kk]) * hw[kk * n + j];
      const double want = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
      diff += (hy[i * n + j] - want) * (hy[i * n + j] - want);
      norm += want * want;
    }
  const double error = std::sqrt(diff / norm);
  std::printf("consumer: ge2 %s, one fused GEMM+bias+GELU layer, relative error %.2e: %s\n",
              ge2_get_version_string(), error, error < 1e-5 ? "PASS" : "FAIL");
  return error < 1e-5 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
