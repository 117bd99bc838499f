// bench_gemm: ge2's kernel paths side by side on a documented list of shapes.
//
// For each shape and path: median of >= 20 timed runs (CUDA events around each
// run, after warm-up), rotating through input sets that together exceed twice
// the L2 cache, random data; TFLOP/s and the fraction of this run's best
// lt_f16 rate; error against an fp64 reference on 256 sampled output elements.
// Also: host overhead per executed node and CUDA-graph replay of a 4-layer MLP.
// Writes bench_gemm.csv, bench_gemm.json and bench_gemm.md to --out.
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

#include "ge_v2_api.h"

namespace {

#define GE2_OK_OR_DIE(call)                                                                      \
  do {                                                                                           \
    ge2_status_t s_ = (call);                                                                    \
    if (s_ != GE2_OK) {                                                                          \
      fmt::print(stderr, "{} failed: {}: {}\n", #call, ge2_status_string(s_), ge2_last_error()); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define CUDA_OR_DIE(call)                                                   \
  do {                                                                      \
    cudaError_t e_ = (call);                                                \
    if (e_ != cudaSuccess) {                                                \
      fmt::print(stderr, "{} failed: {}\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

struct Shape {
  std::int64_t batch, m, n, k;
  std::string group;
};

// The documented shape list (docs/benchmarks.md).
const std::vector<Shape> kShapes = {
    {1, 1024, 1024, 1024, "square"},   {1, 2048, 2048, 2048, "square"},
    {1, 4096, 4096, 4096, "square"},   {1, 8192, 8192, 8192, "square"},
    {1, 16384, 4096, 1024, "ffn"},     {1, 16384, 1024, 4096, "ffn"},
    {1, 1, 4096, 4096, "small-m"},     {1, 16, 4096, 4096, "small-m"},
    {1, 128, 4096, 4096, "small-m"},   {1, 1000, 1000, 1000, "odd"},
    {1, 4095, 4097, 4093, "odd"},      {1, 3001, 2999, 4097, "odd"},
    {16, 1024, 1024, 1024, "batched"}, {64, 256, 256, 256, "batched"},
    {1, 4096, 4096, 8, "small-k"},     {1, 4096, 4096, 16, "small-k"},
    {1, 8192, 1024, 4, "small-k"},     {1, 32, 32, 32, "tiny"},
    {1, 100, 36, 20, "tiny"}};

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
};

struct Result {
  Shape shape;
  Path path;
  double median_us = 0, min_us = 0, tflops = 0, err_mean = 0, err_max = 0;
  std::string chosen;
};

double act_ref(ge2_activation_t act, double x) {
  switch (act) {
    case GE2_ACT_RELU:
      return x > 0 ? x : 0;
    case GE2_ACT_GELU_ERF:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case GE2_ACT_GELU_TANH:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    default:
      return x;
  }
}

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
    std::mt19937 rng(static_cast<unsigned>(s.m * 131 + s.n * 7 + s.k + s.batch));
    const std::size_t elem = path.dtype == GE2_DTYPE_F32 ? 4 : 2;
    const std::size_t a_count = static_cast<std::size_t>(s.batch * s.m * s.k),
                      b_count = static_cast<std::size_t>(s.batch * s.k * s.n);
    const std::size_t d_count = static_cast<std::size_t>(s.batch * s.m * s.n);
    HostOperand a = random_operand(path.dtype, a_count, 1.0, rng);
    HostOperand b =
        random_operand(path.dtype, b_count, 1.0 / std::sqrt(static_cast<double>(s.k)), rng);
    HostOperand bias = random_operand(path.dtype, static_cast<std::size_t>(s.n), 0.5, rng);
    const std::size_t set_bytes = (a_count + b_count) * elem;
    const int sets = static_cast<int>(
        std::clamp<std::size_t>((2 * static_cast<std::size_t>(l2_bytes_)) / set_bytes + 1, 1,
                                std::max<std::size_t>(1, (std::size_t{3} << 30) / set_bytes)));
    std::vector<void*> da(static_cast<std::size_t>(sets)), db(static_cast<std::size_t>(sets));
    for (int i = 0; i < sets; ++i) {
      CUDA_OR_DIE(cudaMalloc(&da[static_cast<std::size_t>(i)], a.bytes()));
      CUDA_OR_DIE(cudaMalloc(&db[static_cast<std::size_t>(i)], b.bytes()));
      CUDA_OR_DIE(
          cudaMemcpy(da[static_cast<std::size_t>(i)], a.data(), a.bytes(), cudaMemcpyHostToDevice));
      CUDA_OR_DIE(
          cudaMemcpy(db[static_cast<std::size_t>(i)], b.data(), b.bytes(), cudaMemcpyHostToDevice));
    }
    void *dbias = nullptr, *dd = nullptr;
    CUDA_OR_DIE(cudaMalloc(&dbias, bias.bytes()));
    CUDA_OR_DIE(cudaMemcpy(dbias, bias.data(), bias.bytes(), cudaMemcpyHostToDevice));
    CUDA_OR_DIE(cudaMalloc(&dd, d_count * elem));
    CUDA_OR_DIE(cudaMemset(dd, 0xff, d_count * elem));  // NaN: unwritten elements show as errors

    ge2_plan_t* plan = compile(s, path);
    Result r{s, path};
    r.chosen = chosen_kernel(plan);
    auto execute = [&](int set) {
      ge2_binding_t bindings[] = {{"a", da[static_cast<std::size_t>(set)]},
                                  {"b", db[static_cast<std::size_t>(set)]},
                                  {"bias", dbias},
                                  {"d", dd}};
      GE2_OK_OR_DIE(ge2_plan_execute(plan, bindings, 4, stream_));
    };
    execute(0);
    CUDA_OR_DIE(cudaStreamSynchronize(stream_));
    // Errors on sampled outputs of set 0 (all sets hold the same values).
    std::vector<unsigned char> out(d_count * elem);
    CUDA_OR_DIE(cudaMemcpy(out.data(), dd, out.size(), cudaMemcpyDeviceToHost));
    sample_errors(s, path, a, b, bias, out, r, rng);

    for (int w = 0; w < 3; ++w) execute(w % sets);
    cudaEvent_t start, stop;
    CUDA_OR_DIE(cudaEventCreate(&start));
    CUDA_OR_DIE(cudaEventCreate(&stop));
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) {
      CUDA_OR_DIE(cudaEventRecord(start, stream_));
      execute(i % sets);
      CUDA_OR_DIE(cudaEventRecord(stop, stream_));
      CUDA_OR_DIE(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, stop));
      times.push_back(ms * 1e3);
    }
    std::sort(times.begin(), times.end());
    r.median_us = times[times.size() / 2];
    r.min_us = times.front();
    r.tflops = 2.0 * s.batch * s.m * s.n * s.k / (r.median_us * 1e6);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    ge2_plan_destroy(plan);
    for (void* p : da) cudaFree(p);
    for (void* p : db) cudaFree(p);
    cudaFree(dbias);
    cudaFree(dd);
    return r;
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
    GE2_OK_OR_DIE(ge2_graph_add_input(graph, "bias", &dbias, &bias));
    GE2_OK_OR_DIE(ge2_graph_add_gemm(graph, a, b, GE2_NO_VALUE, nullptr, &out));
    GE2_OK_OR_DIE(ge2_graph_add_bias(graph, out, bias, &out));
    if (path.act != GE2_ACT_NONE)
      GE2_OK_OR_DIE(ge2_graph_add_activation(graph, out, path.act, &out));
    GE2_OK_OR_DIE(ge2_graph_mark_output(graph, out, "d", nullptr));
    ge2_compile_options_t options;
    ge2_compile_options_init(&options);
    options.fuse = path.fuse;
    options.allow_tf32 = 1;
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
      if (step["kernel"].contains("algo_source"))
        names += "(" + step["kernel"]["algo_source"].get<std::string>().substr(0, 9) + ")";
    }
    return names;
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
      const double want = act_ref(path.act, acc + bias.get(static_cast<std::size_t>(j)));
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

// Host time to enqueue one execution of an N-layer 32-wide MLP, per node, and
// the replay time of the same plan captured in a CUDA graph.
nlohmann::json measure_overhead(ge2_context_t* context, cudaStream_t stream, int layers,
                                std::int64_t batch, std::int64_t hidden) {
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
  ge2_plan_t* plan = nullptr;
  GE2_OK_OR_DIE(ge2_plan_compile(context, graph, nullptr, &plan));
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
  for (int i = 0; i < 50; ++i)
    GE2_OK_OR_DIE(ge2_plan_execute(plan, bindings.data(), bindings.size(), stream));
  CUDA_OR_DIE(cudaStreamSynchronize(stream));
  // Host cost: enqueue calls timed with a host clock, in batches short enough
  // not to fill the launch queue; median over batches.
  std::vector<double> host_us;
  for (int rep = 0; rep < 31; ++rep) {
    const int calls = 100;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i)
      GE2_OK_OR_DIE(ge2_plan_execute(plan, bindings.data(), bindings.size(), stream));
    const auto t1 = std::chrono::steady_clock::now();
    CUDA_OR_DIE(cudaStreamSynchronize(stream));
    host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(host_us.begin(), host_us.end());
  // Device time per eager execution (events around 100 back-to-back executions).
  cudaEvent_t start, stop;
  CUDA_OR_DIE(cudaEventCreate(&start));
  CUDA_OR_DIE(cudaEventCreate(&stop));
  auto time_us = [&](auto&& body, int count) {
    std::vector<double> t;
    for (int rep = 0; rep < 21; ++rep) {
      CUDA_OR_DIE(cudaEventRecord(start, stream));
      for (int i = 0; i < count; ++i) body();
      CUDA_OR_DIE(cudaEventRecord(stop, stream));
      CUDA_OR_DIE(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, stop));
      t.push_back(ms * 1e3 / count);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const double eager_us = time_us(
      [&] { GE2_OK_OR_DIE(ge2_plan_execute(plan, bindings.data(), bindings.size(), stream)); },
      100);
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
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  ge2_plan_destroy(plan);
  for (void* p : buffers) cudaFree(p);
  return {{"layers", layers},
          {"batch", batch},
          {"hidden", hidden},
          {"host_us_per_execute", host_us[host_us.size() / 2]},
          {"host_us_per_node", host_us[host_us.size() / 2] / layers},
          {"eager_us_per_execute", eager_us},
          {"graph_replay_us", replay_us}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--out" && i + 1 < argc)
      out_dir = argv[++i];
    else if (std::string(argv[i]) == "--quick")
      quick = true;
    else {
      fmt::print(stderr, "usage: bench_gemm [--out DIR] [--quick]\n");
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
  };
  std::vector<Result> results;
  for (const Shape& s : kShapes) {
    if (quick && s.m * s.n * s.k > (std::int64_t{1} << 33)) continue;
    for (const Path& p : paths) {
      // The slow reference paths on the largest shapes only add minutes.
      if ((p.kernel == "cuda_f32" || p.kernel == "lt_f32") &&
          s.m * s.n * s.k * s.batch > (std::int64_t{1} << 37))
        continue;
      Result r = bench.run(s, p, reps);
      fmt::print(
          "{:>3}x{:>5}x{:>5}x{:>5}  {:<30} {:>10.1f} us {:>8.1f} TFLOP/s  err mean {:.1e} max "
          "{:.1e}  [{}]\n",
          s.batch, s.m, s.n, s.k, p.name, r.median_us, r.tflops, r.err_mean, r.err_max, r.chosen);
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  double peak = 0;
  for (const auto& r : results)
    if (r.path.dtype == GE2_DTYPE_F16) peak = std::max(peak, r.tflops);

  nlohmann::json overhead = nlohmann::json::array();
  for (auto [layers, batch, hidden] :
       {std::tuple{4, 32, 32}, std::tuple{1, 32, 32}, std::tuple{4, 1, 4096},
        std::tuple{4, 16, 4096}, std::tuple{4, 128, 4096}}) {
    overhead.push_back(measure_overhead(heuristic, bench.stream(), layers, batch, hidden));
    fmt::print("overhead: {}\n", overhead.back().dump());
  }

  nlohmann::json j{{"device", bench.device()},
                   {"l2_bytes", bench.l2_bytes()},
                   {"reps", reps},
                   {"best_f16_tflops", peak},
                   {"overhead", overhead},
                   {"results", nlohmann::json::array()}};
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
                            {"tflops", r.tflops},
                            {"err_mean", r.err_mean},
                            {"err_max", r.err_max}});
  }
  md << "\n| layers | batch | hidden | host us / execute | host us / node | eager us / execute | "
        "CUDA-graph replay us |\n|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& o : overhead)
    md << fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n",
                      o["layers"].get<int>(), o["batch"].get<std::int64_t>(),
                      o["hidden"].get<std::int64_t>(), o["host_us_per_execute"].get<double>(),
                      o["host_us_per_node"].get<double>(), o["eager_us_per_execute"].get<double>(),
                      o["graph_replay_us"].get<double>());
  std::ofstream(out_dir + "/bench_gemm.json") << j.dump(1);
  ge2_context_destroy(heuristic);
  ge2_context_destroy(tuned);
  fmt::print("bench_gemm: {} rows on {}, best f16 {:.0f} TFLOP/s; results in {}\n", results.size(),
             bench.device(), peak, out_dir);
  return 0;
}
