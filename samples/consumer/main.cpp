// The C++ sample: ge2's header-only C++ wrapper (RAII handles, exceptions),
// one fused layer on the CPU backend, checked against a double-precision loop.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <ge_v2_api.hpp>

int main() try {
  ge2_context_options_t options = ge2::cxx::context_options();
  options.device = GE2_DEVICE_CPU;  // host arrays below; the CPU backend runs anywhere
  options.tunedb_path = "";
  ge2::cxx::Context context(options);

  constexpr std::int64_t m = 32, n = 24, k = 40;
  ge2::cxx::Graph graph;
  const ge2_value_t x = graph.input("x", {GE2_DTYPE_F32, 2, {m, k}, {}});
  const ge2_value_t w = graph.input("w", {GE2_DTYPE_F32, 2, {k, n}, {}});
  const ge2_value_t b = graph.input("b", {GE2_DTYPE_F32, 1, {n}, {}});
  graph.output(graph.gemm_bias_act(x, w, b, GE2_ACT_GELU_ERF), "y");
  ge2::cxx::Plan plan(context, graph);

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> hx(m * k), hw(k * n), hb(n), hy(m * n, NAN);
  for (auto* v : {&hx, &hw, &hb})
    for (float& e : *v) e = dist(rng);
  plan.execute({{"x", hx.data()}, {"w", hw.data()}, {"b", hb.data()}, {"y", hy.data()}});

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
} catch (const ge2::cxx::Error& e) {
  std::fprintf(stderr, "consumer: %s (status %d)\n", e.what(), static_cast<int>(e.status()));
  return 1;
}
