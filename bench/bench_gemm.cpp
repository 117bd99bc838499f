// bench_gemm: ge2's kernel paths side by side on a documented list of shapes.
//
// For each shape and path: median of 25 timed groups after warm-up; a group is
// a run of back-to-back executions (about 2 ms of GPU work, at most 50) between
// two CUDA events, rotating through input sets that together exceed twice the
// L2 cache, random data -- the method of bench/peers.py, so that host cost only
// shows where it exceeds the GPU time. TFLOP/s and the fraction of this run's
// best lt_f16 rate; error against an fp64 reference on 256 sampled outputs.
// Also: tuned against heuristic algorithms timed in alternation, host overhead
// per executed node (and what cublasLtMatmul alone costs on the host), and
// CUDA-graph replay of an MLP.
// Writes bench_gemm.csv, bench_gemm.json and bench_gemm.md to --out.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cuda_or_die.hpp"
#include "ge_v2_api.h"
#include "group_timer.hpp"
#include "support/reference.hpp"

namespace {

#define GE2_OK_OR_DIE(call)                                                                      \
  do {                                                                                           \
    ge2_status_t s_ = (call);                                                                    \
    if (s_ != GE2_OK) {                                                                          \
      fmt::print(stderr, "{} failed: {}: {}\n", #call, ge2_status_string(s_), ge2_last_error()); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

struct Shape {
  std::int64_t batch, m, n, k;
  std::string group;
};

// The documented shape list (docs/benchmarks.md).
const std::vector<Shape> kShapes = {
    {1, 1024, 1024, 1024, "square"},
    {1, 2048, 2048, 2048, "square"},
    {1, 4096, 4096, 4096, "square"},
    {1, 8192, 8192, 8192, "square"},
    {1, 16384, 4096, 1024, "ffn"},
    {1, 16384, 1024, 4096, "ffn"},
    {1, 1, 4096, 4096, "small-m"},
    {1, 16, 4096, 4096, "small-m"},
    {1, 128, 4096, 4096, "small-m"},
    {1, 1000, 1000, 1000, "odd"},
    {1, 4095, 4097, 4093, "odd"},
    {1, 3001, 2999, 4097, "odd"},
    {16, 1024, 1024, 1024, "batched"},
    {64, 256, 256, 256, "batched"},
    {1, 4096, 4096, 8, "small-k"},
    {1, 4096, 4096, 16, "small-k"},
    {1, 8192, 1024, 4, "small-k"},
    {1, 32, 32, 32, "tiny"},
    {1, 100, 36, 20, "tiny"},
    // Held out: added after the selector's model was fitted (run 3), never used to fit it.
    {1, 4096, 11008, 4096, "holdout"},
    {1, 256, 4096, 14336, "holdout"},
    {1, 768, 3072, 768, "holdout"},
    {4, 512, 4096, 1024, "holdout"},
    {1, 2049, 1023, 513, "holdout"},
    {1, 511, 513, 509, "holdout"},
    {1, 4096, 4096, 32, "holdout"}};

std::uint16_t to_half(float v) {
  std::uint32_t x;
  std::memcpy(&x, &v, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
  if (abs < 0x38800000u)
    return static_cast<std::uint16_t>(
        sign | static_cast<std::uint32_t>(std::nearbyint(std::fabs(v) * 16777216.0f)));
  return static_cast<std::uint16_t>(sign |
                                    ((abs + 0xfffu + ((abs >> 13) & 1u) - 0x38000000u) >> 13));
}
double from_half(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
std::uint16_t to_bf16(float v) {
  std::uint32_t x;
  std::memcpy(&x, &v, 4);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
double from_bf16(std::uint16_t h) {
  const std::uint32_t x = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Host copy of the operands in their storage format, for the reference.
struct HostOperand {
  ge2_dtype_t dtype;
  std::vector<std::uint16_t> bits16;
  std::vector<float> f32;
  double get(std::size_t i) const {
    if (dtype == GE2_DTYPE_F32) return f32[i];
    return dtype == GE2_DTYPE_F16 ? from_half(bits16[i]) : from_bf16(bits16[i]);
  }
  const void* data() const {
    return dtype == GE2_DTYPE_F32 ? static_cast<const void*>(f32.data()) : bits16.data();
  }
  std::size_t bytes() const { return dtype == GE2_DTYPE_F32 ? f32.size() * 4 : bits16.size() * 2; }
};

HostOperand random_operand(ge2_dtype_t dtype, std::size_t count, double scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  HostOperand op{dtype, {}, {}};
  if (dtype == GE2_DTYPE_F32) {
    op.f32.resize(count);
    for (auto& v : op.f32) v = static_cast<float>(scale * dist(rng));
  } else {
    op.bits16.resize(count);
    for (auto& v : op.bits16)
      v = dtype == GE2_DTYPE_F16 ? to_half(static_cast<float>(scale * dist(rng)))
                                 : to_bf16(static_cast<float>(scale * dist(rng)));
  }
  return op;
}

struct Path {
  std::string name;    // row label
  std::string kernel;  // forced kernel, "" = selector
  ge2_dtype_t dtype;
  ge2_activation_t act;
  bool fuse = true;  // false: GEMM, bias add and activation as separate steps
  ge2_tune_mode_t tune = GE2_TUNE_OFF;
  bool has_bias = true;
  bool allow_staging = true;
};

struct Result {
  Shape shape;
  Path path;
  double median_us = 0, min_us = 0, tflops = 0, err_mean = 0, err_max = 0;
  int group = 1;  // executions per timed group
  std::string chosen;
};

// Tuned and heuristic plans of one shape, timed in alternation.
struct TunedComparison {
  Shape shape;
  double heuristic_us = 0, tuned_us = 0;
  double heuristic_spread = 0, tuned_spread = 0;  // (p90 - p10) / median
  std::string heuristic_algo, tuned_algo;
};

double spread_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double p10 = v[v.size() / 10], p90 = v[v.size() * 9 / 10];
  return (p90 - p10) / v[v.size() / 2];
}

// Device buffers of one shape: rotating A/B sets larger than twice the L2, bias, D.
class Operands {
 public:
  Operands(const Shape& s, ge2_dtype_t dtype, int l2_bytes)
      : rng_(static_cast<unsigned>(s.m * 131 + s.n * 7 + s.k + s.batch)) {
    const std::size_t elem = dtype == GE2_DTYPE_F32 ? 4 : 2;
    const std::size_t a_count = static_cast<std::size_t>(s.batch * s.m * s.k),
                      b_count = static_cast<std::size_t>(s.batch * s.k * s.n);
    d_bytes_ = static_cast<std::size_t>(s.batch * s.m * s.n) * elem;
    a = random_operand(dtype, a_count, 1.0, rng_);
    b = random_operand(dtype, b_count, 1.0 / std::sqrt(static_cast<double>(s.k)), rng_);
    bias = random_operand(dtype, static_cast<std::size_t>(s.n), 0.5, rng_);
    const std::size_t set_bytes = (a_count + b_count) * elem;
    sets = static_cast<int>(
        std::clamp<std::size_t>((2 * static_cast<std::size_t>(l2_bytes)) / set_bytes + 1, 1,
                                std::max<std::size_t>(1, (std::size_t{3} << 30) / set_bytes)));
    for (int i = 0; i < sets; ++i) {
      da_.push_back(upload(a));
      db_.push_back(upload(b));
    }
    dbias_ = upload(bias);
    CUDA_OR_DIE(cudaMalloc(&dd_, d_bytes_));
    CUDA_OR_DIE(cudaMemset(dd_, 0xff, d_bytes_));  // NaN: unwritten elements show as errors
  }
  ~Operands() {
    for (void* p : da_) cudaFree(p);
    for (void* p : db_) cudaFree(p);
    cudaFree(dbias_);
    cudaFree(dd_);
  }
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;

  void execute(ge2_plan_t* plan, int set, cudaStream_t stream, bool with_bias = true) const {
    const auto i = static_cast<std::size_t>(set % sets);
    ge2_binding_t bindings[] = {{"a", da_[i]}, {"b", db_[i]}, {"d", dd_}, {"bias", dbias_}};
    GE2_OK_OR_DIE(ge2_plan_execute(plan, bindings, with_bias ? 4 : 3, stream));
  }
  std::vector<unsigned char> download_d() const {
    std::vector<unsigned char> out(d_bytes_);
    CUDA_OR_DIE(cudaMemcpy(out.data(), dd_, out.size(), cudaMemcpyDeviceToHost));
    return out;
  }
  std::mt19937& rng() { return rng_; }

  HostOperand a, b, bias;
  int sets = 1;

 private:
  static void* upload(const HostOperand& h) {
    void* p = nullptr;
    CUDA_OR_DIE(cudaMalloc(&p, h.bytes()));
    CUDA_OR_DIE(cudaMemcpy(p, h.data(), h.bytes(), cudaMemcpyHostToDevice));
    return p;
  }
  std::mt19937 rng_;
  std::vector<void*> da_, db_;
  void *dbias_ = nullptr, *dd_ = nullptr;
  std::size_t d_bytes_ = 0;
};

class Bench {
 public:
  Bench(ge2_context_t* heuristic_ctx, ge2_context_t* tune_ctx)
      : heuristic_(heuristic_ctx), tuned_(tune_ctx) {
    CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaDeviceProp props{};
    CUDA_OR_DIE(cudaGetDeviceProperties(&props, 0));
    l2_bytes_ = props.l2CacheSize;
    device_ = props.name;
  }

  Result run(const Shape& s, const Path& path, int reps) {
    Operands ops(s, path.dtype, l2_bytes_);
    ge2_plan_t* plan = compile(s, path);
    Result r{s, path};
    r.chosen = chosen_kernel(plan);
    ops.execute(plan, 0, stream_, path.has_bias);
    CUDA_OR_DIE(cudaStreamSynchronize(stream_));
    // Errors on sampled outputs of set 0 (all sets hold the same values).
    sample_errors(s, path, ops.a, ops.b, ops.bias, ops.download_d(), r, ops.rng());

    auto body = [&](int set) { ops.execute(plan, set, stream_, path.has_bias); };
    for (int w = 0; w < 3; ++w) body(w);
    GroupTimer timer;
    r.group = timer.group_size(body, stream_);
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) times.push_back(timer.time_group(body, r.group, i, stream_));
    std::sort(times.begin(), times.end());
    r.median_us = times[times.size() / 2];
    r.min_us = times.front();
    r.tflops = 2.0 * s.batch * s.m * s.n * s.k / (r.median_us * 1e6);
    ge2_plan_destroy(plan);
    return r;
  }

  // The heuristic's and the tuner's algorithm for one f16 bias+ReLU layer, timed
  // in alternation (group by group) so that clock and thermal drift hit both.
  TunedComparison compare_tuned(const Shape& s, int rounds) {
    const Path heuristic{"heuristic", "lt_f16", GE2_DTYPE_F16, GE2_ACT_RELU};
    Path tuned = heuristic;
    tuned.tune = GE2_TUNE_TUNE;
    Operands ops(s, GE2_DTYPE_F16, l2_bytes_);
    ge2_plan_t* plans[2] = {compile(s, heuristic), compile(s, tuned)};
    TunedComparison c{s};
    c.heuristic_algo = algo_summary(plans[0]);
    c.tuned_algo = algo_summary(plans[1]);
    GroupTimer timer;
    std::vector<double> times[2];
    int group = 1;
    for (int p = 0; p < 2; ++p) {
      auto body = [&](int set) { ops.execute(plans[p], set, stream_); };
      for (int w = 0; w < 3; ++w) body(w);
      group = std::max(group, timer.group_size(body, stream_));
    }
    // Alternate which plan goes first in a round, so neither always follows the other.
    for (int round = 0; round < rounds; ++round)
      for (int q = 0; q < 2; ++q) {
        const int p = round % 2 == 0 ? q : 1 - q;
        times[p].push_back(timer.time_group([&](int set) { ops.execute(plans[p], set, stream_); },
                                            group, round, stream_));
      }
    c.heuristic_us = median_of(times[0]);
    c.tuned_us = median_of(times[1]);
    c.heuristic_spread = spread_of(times[0]);
    c.tuned_spread = spread_of(times[1]);
    ge2_plan_destroy(plans[0]);
    ge2_plan_destroy(plans[1]);
    return c;
  }

  cudaStream_t stream() const { return stream_; }
  const std::string& device() const { return device_; }
  int l2_bytes() const { return l2_bytes_; }

 private:
  ge2_plan_t* compile(const Shape& s, const Path& path) {
    ge2_graph_t* graph = nullptr;
    GE2_OK_OR_DIE(ge2_graph_create(&graph));
    ge2_tensor_desc_t da{}, db{}, dbias{};
    da.dtype = db.dtype = dbias.dtype = path.dtype;
    if (s.batch > 1) {
      da.rank = db.rank = 3;
      da.shape[0] = db.shape[0] = s.batch;
      da.shape[1] = s.m, da.shape[2] = s.k;
      db.shape[1] = s.k, db.shape[2] = s.n;
    } else {
      da.rank = db.rank = 2;
      da.shape[0] = s.m, da.shape[1] = s.k;
      db.shape[0] = s.k, db.shape[1] = s.n;
    }
    dbias.rank = 1;
    dbias.shape[0] = s.n;
    ge2_value_t a, b, bias, out;
    GE2_OK_OR_DIE(ge2_graph_add_input(graph, "a", &da, &a));
    GE2_OK_OR_DIE(ge2_graph_add_input(graph, "b", &db, &b));
    if (path.has_bias) GE2_OK_OR_DIE(ge2_graph_add_input(graph, "bias", &dbias, &bias));
    GE2_OK_OR_DIE(ge2_graph_add_gemm(graph, a, b, GE2_NO_VALUE, nullptr, &out));
    if (path.has_bias) GE2_OK_OR_DIE(ge2_graph_add_bias(graph, out, bias, &out));
    if (path.act != GE2_ACT_NONE)
      GE2_OK_OR_DIE(ge2_graph_add_activation(graph, out, path.act, &out));
    GE2_OK_OR_DIE(ge2_graph_mark_output(graph, out, "d", nullptr));
    ge2_compile_options_t options;
    ge2_compile_options_init(&options);
    options.fuse = path.fuse;
    options.allow_tf32 = 1;
    options.allow_staging = path.allow_staging;
    options.force_kernel = path.kernel.empty() ? nullptr : path.kernel.c_str();
    ge2_plan_t* plan = nullptr;
    GE2_OK_OR_DIE(
        ge2_plan_compile(path.tune == GE2_TUNE_TUNE ? tuned_ : heuristic_, graph, &options, &plan));
    ge2_graph_destroy(graph);
    return plan;
  }

  static std::string chosen_kernel(ge2_plan_t* plan) {
    const char* text = nullptr;
    GE2_OK_OR_DIE(ge2_plan_describe(plan, &text));
    const auto j = nlohmann::json::parse(text);
    std::string names;
    for (const auto& step : j["steps"]) {
      if (!names.empty()) names += "+";
      names += step["kernel"]["name"].get<std::string>();
      if (step["kernel"].value("staged", false)) names += " staged";
      if (step["kernel"].contains("algo_source"))
        names += "(" + step["kernel"]["algo_source"].get<std::string>().substr(0, 9) + ")";
    }
    return names;
  }

  static std::string algo_summary(ge2_plan_t* plan) {
    const char* text = nullptr;
    GE2_OK_OR_DIE(ge2_plan_describe(plan, &text));
    const auto step = nlohmann::json::parse(text)["steps"][0]["kernel"];
    return step.contains("algo") ? step["algo"].dump() : std::string("-");
  }

  static void sample_errors(const Shape& s, const Path& path, const HostOperand& a,
                            const HostOperand& b, const HostOperand& bias,
                            const std::vector<unsigned char>& out, Result& r, std::mt19937& rng) {
    const int samples = 256;
    std::vector<double> errs, refs;
    for (int t = 0; t < samples; ++t) {
      const std::int64_t z = std::uniform_int_distribution<std::int64_t>(0, s.batch - 1)(rng);
      const std::int64_t i = std::uniform_int_distribution<std::int64_t>(0, s.m - 1)(rng);
      const std::int64_t j = std::uniform_int_distribution<std::int64_t>(0, s.n - 1)(rng);
      double acc = 0;
      for (std::int64_t kk = 0; kk < s.k; ++kk)
        acc += a.get(static_cast<std::size_t>((z * s.m + i) * s.k + kk)) *
               b.get(static_cast<std::size_t>((z * s.k + kk) * s.n + j));
      const double want = ge2::test::activation_ref(
          path.act, acc + (path.has_bias ? bias.get(static_cast<std::size_t>(j)) : 0.0));
      const std::size_t index = static_cast<std::size_t>((z * s.m + i) * s.n + j);
      double got;
      if (path.dtype == GE2_DTYPE_F32) {
        float f;
        std::memcpy(&f, out.data() + index * 4, 4);
        got = f;
      } else {
        std::uint16_t h;
        std::memcpy(&h, out.data() + index * 2, 2);
        got = path.dtype == GE2_DTYPE_F16 ? from_half(h) : from_bf16(h);
      }
      errs.push_back(std::isfinite(got) ? std::fabs(got - want) : INFINITY);
      refs.push_back(want * want);
    }
    double rms = 0;
    for (double v : refs) rms += v;
    rms = std::sqrt(rms / samples);
    double sum = 0, mx = 0;
    for (double e : errs) {
      sum += e / rms;
      mx = std::max(mx, e / rms);
    }
    r.err_mean = sum / samples;
    r.err_max = mx;
  }

  ge2_context_t* heuristic_;
  ge2_context_t* tuned_;
  cudaStream_t stream_ = nullptr;
  int l2_bytes_ = 0;
  std::string device_;
};

ge2_context_t* make_context(ge2_tune_mode_t mode, const std::string& tunedb) {
  ge2_context_options_t options;
  ge2_context_options_init(&options);
  options.device = GE2_DEVICE_CUDA;
  options.tune_mode = mode;
  options.tunedb_path = tunedb.c_str();
  ge2_context_t* context = nullptr;
  GE2_OK_OR_DIE(ge2_context_create(GE2_API_VERSION, &options, &context));
  return context;
}

// Host time of one enqueue call, after 50 warm-up calls: 31 batches of 100
// calls timed with a host clock (short enough not to fill the launch queue),
// each followed by a synchronisation; the median batch.
template <typename Call>
double median_host_us_per_call(Call&& call, cudaStream_t stream) {
  for (int i = 0; i < 50; ++i) call();
  CUDA_OR_DIE(cudaStreamSynchronize(stream));
  std::vector<double> host_us;
  for (int rep = 0; rep < 31; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) call();
    const auto t1 = std::chrono::steady_clock::now();
    CUDA_OR_DIE(cudaStreamSynchronize(stream));
    host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 100);
  }
  return median_of(host_us);
}

// The floor under ge2's per-node host cost: cublasLtMatmul alone, called with
// descriptors and an algorithm prepared once (as ge2's steps do), for one
// hidden x hidden f16 layer with the bias+ReLU epilogue. Median host us per call.
double cublaslt_host_us_per_call(cudaStream_t stream, std::int64_t batch, std::int64_t hidden) {
#define LT_OR_DIE(call)                                                    \
  do {                                                                     \
    cublasStatus_t st_ = (call);                                           \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                    \
      fmt::print(stderr, "{} failed: {}\n", #call, static_cast<int>(st_)); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)
  cublasLtHandle_t lt;
  LT_OR_DIE(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t desc;
  LT_OR_DIE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
  LT_OR_DIE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                           sizeof(epilogue)));
  void *a, *b, *bias, *d, *workspace;
  const std::size_t workspace_bytes = std::size_t{32} << 20;
  CUDA_OR_DIE(cudaMalloc(&a, static_cast<std::size_t>(batch * hidden * 2)));
  CUDA_OR_DIE(cudaMalloc(&b, static_cast<std::size_t>(hidden * hidden * 2)));
  CUDA_OR_DIE(cudaMalloc(&bias, static_cast<std::size_t>(hidden * 2)));
  CUDA_OR_DIE(cudaMalloc(&d, static_cast<std::size_t>(batch * hidden * 2)));
  CUDA_OR_DIE(cudaMalloc(&workspace, workspace_bytes));
  CUDA_OR_DIE(cudaMemset(a, 0, static_cast<std::size_t>(batch * hidden * 2)));
  CUDA_OR_DIE(cudaMemset(b, 0, static_cast<std::size_t>(hidden * hidden * 2)));
  CUDA_OR_DIE(cudaMemset(bias, 0, static_cast<std::size_t>(hidden * 2)));
  LT_OR_DIE(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  // Column-major D^T (hidden x batch) = B^T (hidden x hidden) * A^T (hidden x batch).
  cublasLtMatrixLayout_t lb, la, ld;
  LT_OR_DIE(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, hidden, hidden, hidden));
  LT_OR_DIE(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, hidden, batch, hidden));
  LT_OR_DIE(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, hidden, batch, hidden));
  cublasLtMatmulPreference_t preference;
  LT_OR_DIE(cublasLtMatmulPreferenceCreate(&preference));
  LT_OR_DIE(cublasLtMatmulPreferenceSetAttribute(preference,
                                                 CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  LT_OR_DIE(
      cublasLtMatmulAlgoGetHeuristic(lt, desc, lb, la, ld, ld, preference, 1, &result, &returned));
  const float alpha = 1.0f, beta = 0.0f;
  auto call = [&] {
    LT_OR_DIE(cublasLtMatmul(lt, desc, &alpha, b, lb, a, la, &beta, d, ld, d, ld, &result.algo,
                             workspace, workspace_bytes, stream));
  };
  const double host_us = median_host_us_per_call(call, stream);
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
  for (void* p : {a, b, bias, d, workspace}) cudaFree(p);
#undef LT_OR_DIE
  return host_us;
}

// Host time to enqueue one execution of an N-layer 32-wide MLP, per node, and
// the replay time of the same plan captured in a CUDA graph.
nlohmann::json measure_overhead(ge2_context_t* context, cudaStream_t stream, int layers,
                                std::int64_t batch, std::int64_t hidden, bool graph_replay) {
  ge2_graph_t* graph = nullptr;
  GE2_OK_OR_DIE(ge2_graph_create(&graph));
  ge2_tensor_desc_t dx{GE2_DTYPE_F16, 2, {batch, hidden}, {0, 0}},
      dw{GE2_DTYPE_F16, 2, {hidden, hidden}, {0, 0}}, db{GE2_DTYPE_F16, 1, {hidden}, {0}};
  ge2_value_t h;
  GE2_OK_OR_DIE(ge2_graph_add_input(graph, "x", &dx, &h));
  std::vector<std::string> names;
  for (int l = 0; l < layers; ++l) {
    names.push_back(fmt::format("w{}", l));
    names.push_back(fmt::format("b{}", l));
  }
  for (int l = 0; l < layers; ++l) {
    ge2_value_t w, b;
    GE2_OK_OR_DIE(
        ge2_graph_add_input(graph, names[static_cast<std::size_t>(2 * l)].c_str(), &dw, &w));
    GE2_OK_OR_DIE(
        ge2_graph_add_input(graph, names[static_cast<std::size_t>(2 * l + 1)].c_str(), &db, &b));
    GE2_OK_OR_DIE(ge2_graph_add_gemm_bias_act(graph, h, w, b, nullptr,
                                              l + 1 < layers ? GE2_ACT_RELU : GE2_ACT_NONE, &h));
  }
  GE2_OK_OR_DIE(ge2_graph_mark_output(graph, h, "y", nullptr));
  ge2_compile_options_t options;
  GE2_OK_OR_DIE(ge2_compile_options_init(&options));
  options.graph_replay = graph_replay ? 1 : 0;
  ge2_plan_t* plan = nullptr;
  GE2_OK_OR_DIE(ge2_plan_compile(context, graph, &options, &plan));
  ge2_graph_destroy(graph);
  std::vector<void*> buffers;
  std::vector<ge2_binding_t> bindings;
  auto bind = [&](const char* name, std::size_t bytes) {
    void* p = nullptr;
    CUDA_OR_DIE(cudaMalloc(&p, bytes));
    CUDA_OR_DIE(cudaMemset(p, 0x11, bytes));  // small finite fp16 values
    buffers.push_back(p);
    bindings.push_back({name, p});
  };
  bind("x", static_cast<std::size_t>(batch * hidden * 2));
  for (int l = 0; l < layers; ++l) {
    bind(names[static_cast<std::size_t>(2 * l)].c_str(),
         static_cast<std::size_t>(hidden * hidden * 2));
    bind(names[static_cast<std::size_t>(2 * l + 1)].c_str(), static_cast<std::size_t>(hidden * 2));
  }
  bind("y", static_cast<std::size_t>(batch * hidden * 2));
  auto execute = [&] {
    GE2_OK_OR_DIE(ge2_plan_execute(plan, bindings.data(), bindings.size(), stream));
  };
  const double host_us = median_host_us_per_call(execute, stream);
  // Device time per eager execution (events around 100 back-to-back executions).
  GroupTimer timer;
  auto time_us = [&](auto&& body, int count) {
    std::vector<double> t;
    for (int rep = 0; rep < 21; ++rep)
      t.push_back(timer.time_group([&](int) { body(); }, count, 0, stream));
    return median_of(t);
  };
  const double eager_us = time_us(execute, 100);
  // CUDA-graph capture of one execution (after warm-up, nothing allocates).
  cudaGraph_t cuda_graph;
  cudaGraphExec_t instance;
  CUDA_OR_DIE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  GE2_OK_OR_DIE(ge2_plan_execute(plan, bindings.data(), bindings.size(), stream));
  CUDA_OR_DIE(cudaStreamEndCapture(stream, &cuda_graph));
  CUDA_OR_DIE(cudaGraphInstantiate(&instance, cuda_graph, 0));
  for (int i = 0; i < 10; ++i) CUDA_OR_DIE(cudaGraphLaunch(instance, stream));
  const double replay_us = time_us([&] { CUDA_OR_DIE(cudaGraphLaunch(instance, stream)); }, 100);
  cudaGraphExecDestroy(instance);
  cudaGraphDestroy(cuda_graph);
  ge2_plan_destroy(plan);
  for (void* p : buffers) cudaFree(p);
  return {{"layers", layers},
          {"graph_replay", graph_replay},
          {"batch", batch},
          {"hidden", hidden},
          {"host_us_per_execute", host_us},
          {"host_us_per_node", host_us / layers},
          {"cublaslt_alone_host_us_per_call", cublaslt_host_us_per_call(stream, batch, hidden)},
          {"eager_us_per_execute", eager_us},
          {"graph_replay_us", replay_us}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".";
  bool quick = false, overhead_only = false;  // overhead only: host cost and replay rows
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--out" && i + 1 < argc)
      out_dir = argv[++i];
    else if (std::string(argv[i]) == "--quick")
      quick = true;
    else if (std::string(argv[i]) == "--overhead-only")
      overhead_only = true;
    else {
      fmt::print(stderr, "usage: bench_gemm [--out DIR] [--quick] [--overhead-only]\n");
      return 2;
    }
  }
  const std::string tunedb = out_dir + "/bench_tunedb.sqlite";
  std::remove(tunedb.c_str());
  ge2_context_t* heuristic = make_context(GE2_TUNE_OFF, "");
  ge2_context_t* tuned = make_context(GE2_TUNE_TUNE, tunedb);
  Bench bench(heuristic, tuned);
  const int reps = 25;

  std::vector<Path> paths = {
      {"cuda_f32 (f16 data) bias+relu", "cuda_f32", GE2_DTYPE_F16, GE2_ACT_RELU},
      {"lt_f32 bias+relu", "lt_f32", GE2_DTYPE_F32, GE2_ACT_RELU},
      {"lt_tf32 bias+relu", "lt_tf32", GE2_DTYPE_F32, GE2_ACT_RELU},
      {"lt_bf16 bias+relu", "lt_bf16", GE2_DTYPE_BF16, GE2_ACT_RELU},
      {"lt_f16 bias+relu fused", "lt_f16", GE2_DTYPE_F16, GE2_ACT_RELU},
      {"lt_f16 bias+relu unfused", "lt_f16", GE2_DTYPE_F16, GE2_ACT_RELU, false},
      {"lt_f16 bias+gelu_tanh fused", "lt_f16", GE2_DTYPE_F16, GE2_ACT_GELU_TANH},
      {"lt_f16 bias+gelu_erf", "lt_f16", GE2_DTYPE_F16, GE2_ACT_GELU_ERF},
      {"lt_f16 bias+relu tuned", "lt_f16", GE2_DTYPE_F16, GE2_ACT_RELU, true, GE2_TUNE_TUNE},
      {"selector bias+relu", "", GE2_DTYPE_F16, GE2_ACT_RELU},
      // The GEMM alone, against which torch.mm is the ceiling.
      {"lt_f16 gemm only", "lt_f16", GE2_DTYPE_F16, GE2_ACT_NONE, true, GE2_TUNE_OFF, false},
      // Unaligned shapes only: what the staging decision is weighed against.
      {"lt_f16 bias+relu unstaged", "lt_f16", GE2_DTYPE_F16, GE2_ACT_RELU, true, GE2_TUNE_OFF, true,
       false},
  };
  auto aligned = [](const Shape& s) { return s.m % 8 == 0 && s.n % 8 == 0 && s.k % 8 == 0; };
  std::vector<Result> results;
  for (const Shape& s : kShapes) {
    if (overhead_only || (quick && s.m * s.n * s.k > (std::int64_t{1} << 33))) continue;
    for (const Path& p : paths) {
      // The slow reference paths on the largest shapes only add minutes.
      if ((p.kernel == "cuda_f32" || p.kernel == "lt_f32") &&
          s.m * s.n * s.k * s.batch > (std::int64_t{1} << 37))
        continue;
      if (!p.allow_staging && aligned(s)) continue;
      Result r = bench.run(s, p, reps);
      fmt::print(
          "{:>3}x{:>5}x{:>5}x{:>5}  {:<30} {:>10.1f} us {:>8.1f} TFLOP/s  err mean {:.1e} max "
          "{:.1e}  [{}]\n",
          s.batch, s.m, s.n, s.k, p.name, r.median_us, r.tflops, r.err_mean, r.err_max, r.chosen);
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  std::vector<TunedComparison> comparisons;
  for (const Shape& s : kShapes) {
    if (overhead_only || (quick && s.m * s.n * s.k > (std::int64_t{1} << 33))) continue;
    comparisons.push_back(bench.compare_tuned(s, 15));
    const auto& c = comparisons.back();
    fmt::print(
        "tuned vs heuristic {}x{}x{}x{}: {:.2f} vs {:.2f} us ({:.3f}x), spread {:.1f}% / {:.1f}%\n",
        s.batch, s.m, s.n, s.k, c.tuned_us, c.heuristic_us, c.heuristic_us / c.tuned_us,
        100 * c.tuned_spread, 100 * c.heuristic_spread);
    std::fflush(stdout);
  }
  double peak = 0;
  for (const auto& r : results)
    if (r.path.dtype == GE2_DTYPE_F16) peak = std::max(peak, r.tflops);

  nlohmann::json overhead = nlohmann::json::array();
  for (bool replay : {false, true})
    for (auto [layers, batch, hidden] :
         {std::tuple{4, 32, 32}, std::tuple{1, 32, 32}, std::tuple{4, 1, 4096},
          std::tuple{4, 16, 4096}, std::tuple{4, 128, 4096}}) {
      overhead.push_back(
          measure_overhead(heuristic, bench.stream(), layers, batch, hidden, replay));
      fmt::print("overhead: {}\n", overhead.back().dump());
    }

  nlohmann::json j{{"device", bench.device()},
                   {"l2_bytes", bench.l2_bytes()},
                   {"reps", reps},
                   {"best_f16_tflops", peak},
                   {"overhead", overhead},
                   {"tuned_vs_heuristic", nlohmann::json::array()},
                   {"results", nlohmann::json::array()}};
  for (const auto& c : comparisons)
    j["tuned_vs_heuristic"].push_back({{"batch", c.shape.batch},
                                       {"m", c.shape.m},
                                       {"n", c.shape.n},
                                       {"k", c.shape.k},
                                       {"heuristic_us", c.heuristic_us},
                                       {"tuned_us", c.tuned_us},
                                       {"speedup", c.heuristic_us / c.tuned_us},
                                       {"heuristic_spread", c.heuristic_spread},
                                       {"tuned_spread", c.tuned_spread},
                                       {"heuristic_algo", c.heuristic_algo},
                                       {"tuned_algo", c.tuned_algo}});
  std::ofstream csv(out_dir + "/bench_gemm.csv");
  csv << "batch,m,n,k,group,path,kernel,dtype,median_us,min_us,tflops,fraction_of_best_f16,err_"
         "mean,err_max\n";
  std::ofstream md(out_dir + "/bench_gemm.md");
  md << "| shape (BxMxNxK) | path | kernel chosen | median us | TFLOP/s | of best f16 | err mean | "
        "err max |\n"
        "|---|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& r : results) {
    const char* dt = r.path.dtype == GE2_DTYPE_F32   ? "f32"
                     : r.path.dtype == GE2_DTYPE_F16 ? "f16"
                                                     : "bf16";
    csv << fmt::format("{},{},{},{},{},{},{},{},{:.2f},{:.2f},{:.2f},{:.3f},{:.3e},{:.3e}\n",
                       r.shape.batch, r.shape.m, r.shape.n, r.shape.k, r.shape.group, r.path.name,
                       r.chosen, dt, r.median_us, r.min_us, r.tflops, r.tflops / peak, r.err_mean,
                       r.err_max);
    md << fmt::format("| {}x{}x{}x{} | {} | {} | {:.1f} | {:.1f} | {:.2f} | {:.1e} | {:.1e} |\n",
                      r.shape.batch, r.shape.m, r.shape.n, r.shape.k, r.path.name, r.chosen,
                      r.median_us, r.tflops, r.tflops / peak, r.err_mean, r.err_max);
    j["results"].push_back({{"batch", r.shape.batch},
                            {"m", r.shape.m},
                            {"n", r.shape.n},
                            {"k", r.shape.k},
                            {"group", r.shape.group},
                            {"path", r.path.name},
                            {"kernel", r.chosen},
                            {"dtype", dt},
                            {"median_us", r.median_us},
                            {"min_us", r.min_us},
                            {"group", r.group},
                            {"tflops", r.tflops},
                            {"err_mean", r.err_mean},
                            {"err_max", r.err_max}});
  }
  md << "\n| layers | batch | hidden | graph_replay option | host us / execute | host us / node | "
        "cublasLtMatmul alone, host us / call | eager us / execute | caller's CUDA-graph replay us "
        "|\n|---:|---:|---:|---|---:|---:|---:|---:|---:|\n";
  for (const auto& o : overhead)
    md << fmt::format("| {} | {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n",
                      o["layers"].get<int>(), o["batch"].get<std::int64_t>(),
                      o["hidden"].get<std::int64_t>(), o["graph_replay"].get<bool>() ? "on" : "off",
                      o["host_us_per_execute"].get<double>(), o["host_us_per_node"].get<double>(),
                      o["cublaslt_alone_host_us_per_call"].get<double>(),
                      o["eager_us_per_execute"].get<double>(), o["graph_replay_us"].get<double>());
  md << "\n| shape (BxMxNxK) | heuristic us | tuned us | speed-up | spread heuristic / tuned "
        "(p90-p10)/median | same algorithm |\n|---|---:|---:|---:|---:|---|\n";
  for (const auto& c : comparisons)
    md << fmt::format("| {}x{}x{}x{} | {:.2f} | {:.2f} | {:.3f}x | {:.1f}% / {:.1f}% | {} |\n",
                      c.shape.batch, c.shape.m, c.shape.n, c.shape.k, c.heuristic_us, c.tuned_us,
                      c.heuristic_us / c.tuned_us, 100 * c.heuristic_spread, 100 * c.tuned_spread,
                      c.heuristic_algo == c.tuned_algo ? "yes" : "no");
  std::ofstream(out_dir + "/bench_gemm.json") << j.dump(1);
  ge2_context_destroy(heuristic);
  ge2_context_destroy(tuned);
  fmt::print("bench_gemm: {} rows on {}, best f16 {:.0f} TFLOP/s; results in {}\n", results.size(),
             bench.device(), peak, out_dir);
  return 0;
}
