// A backend that cannot build the kernel the selector ranked first: the plan
// takes the next candidate and says so, and a forced kernel is never replaced.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "exec/backend.hpp"
#include "exec/plan.hpp"
#include "ir/quantized_constant.hpp"
#include "support/ir_builders.hpp"

using namespace ge2;

namespace {

// Poses as a Hopper GPU offering `offered` (lt_f16 and cuda_f32 unless a test
// says otherwise); refuses `refused` as a cuBLASLt without an algorithm would,
// and runs every other kernel on the CPU reference (the FP8 rows on cpu_fp8_ref).
class RefusingBackend final : public Backend {
 public:
  explicit RefusingBackend(int sm_count = 132) {
    device_.has_cuda = true;
    device_.cc_major = 9;
    device_.sm_count = sm_count;
    device_.memory_bandwidth_gbs = 4000;
  }
  ge2_device_kind_t kind() const override { return GE2_DEVICE_CPU; }
  const DeviceInfo& device() const override { return device_; }
  nlohmann::json describe() const override { return {{"kind", "refusing"}}; }
  std::span<const KernelId> gemm_kernels() const override { return offered; }
  std::unique_ptr<Step> make_gemm(const GemmProblem& problem, const GemmSlots& slots,
                                  KernelId kernel, bool staged, TuneUse tune) override {
    ++attempts;
    tunes.push_back(tune);
    const bool refuse = kernel == refused &&
                        (refused_rows >= 0 ? problem.m == refused_rows : problem.m < lt_rows_from);
    require(!refuse, GE2_ERROR_UNSUPPORTED, "cuBLASLt has no algorithm for this problem (test)");
    problems.push_back(problem);
    return cpu_->make_gemm(problem, slots,
                           is_fp8_kernel(kernel) ? KernelId::CpuFp8Ref : KernelId::CpuRef, staged,
                           tune);
  }
  std::unique_ptr<Step> make_elementwise(const ElementwiseProblem& problem,
                                         const ElementwiseSlots& slots) override {
    return cpu_->make_elementwise(problem, slots);
  }
  // Records what the plan asks for; the emulation (cpu_fp8_ref) reads B as stored.
  std::unique_ptr<Buffer> prepare_gemm_weight(KernelId kernel, const GemmProblem& problem,
                                              const void* b, const void* bias,
                                              const QuantizedData* given) override {
    (void)b, (void)bias;
    if (!is_fp8_kernel(kernel)) return nullptr;
    prepared.push_back({problem, given ? *given : QuantizedData{}});
    // Posing as the CUDA backend's weight-only row: a copy exists (its bytes unread).
    return prepared_only ? cpu_->allocate(fp8_weight_bytes(problem)) : nullptr;
  }
  bool reads_prepared_weight_only(KernelId kernel) const override {
    return prepared_only && kernel == KernelId::CudaSkinnyFp8W;
  }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override { return cpu_->allocate(bytes); }
  void upload(Buffer& destination, const void* host, std::size_t bytes) override {
    cpu_->upload(destination, host, bytes);
  }
  void download(void* host, const void* source, std::size_t bytes) override {
    cpu_->download(host, source, bytes);
  }
  void execute(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
               const std::vector<std::size_t>& io_bytes,
               const std::vector<bool>& io_is_output) override {
    cpu_->execute(steps, state, io_bytes, io_is_output);
  }
  int attempts = 0;
  std::vector<TuneUse> tunes;  // of every make_gemm call
  std::vector<KernelId> offered{KernelId::LtF16, KernelId::CudaF32};
  KernelId refused = KernelId::LtF16;
  std::int64_t lt_rows_from = std::numeric_limits<std::int64_t>::max();  // `refused` runs M >= this
  std::int64_t refused_rows = -1;     // when >= 0: `refused` is refused at this M only
  std::vector<GemmProblem> problems;  // of every step built
  struct Prepared {
    GemmProblem problem;
    QuantizedData given;  // rows 0: none was given
  };
  std::vector<Prepared> prepared;  // of every prepare_gemm_weight call for an FP8 row
  // Claim the CUDA backend's cuda_skinny_fp8w, which reads only its e4m3 copy (such a
  // plan compiles and describes itself; its emulated steps cannot run).
  bool prepared_only = false;

 private:
  DeviceInfo device_;
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

// d = a b with a [64, 32] (its rows dynamic when `dynamic`) and b [32, 16].
Graph gemm_graph(bool dynamic = false, DType dtype = DType::F16) {
  Graph g;
  TensorType a_type = TensorType::dense(dtype, 2, {64, 32, 0});
  a_type.dynamic = dynamic;
  Node d;
  d.kind = OpKind::Gemm;
  d.a = test::add_input(g, "a", a_type);
  d.b = test::add_input(g, "b", TensorType::dense(dtype, 2, {32, 16, 0}));
  g.add_output({test::add_node(g, d), "d", std::nullopt});
  return g;
}

// x wᵀ: an nn.Linear layer without bias, weight [out, in].
ValueId linear(Graph& g, ValueId x, ValueId weight) {
  Node n;
  n.kind = OpKind::Gemm;
  n.a = x;
  n.b = weight;
  n.gemm.trans_b = true;
  return test::add_node(g, n);
}

// `count` f16 values uniform in [-scale, scale).
std::vector<std::uint16_t> random_f16(std::mt19937& rng, std::size_t count, float scale) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::uint16_t> values(count);
  for (auto& v : values) v = float_to_half_bits(scale * dist(rng));
  return values;
}

// Element i of f16 values, as a double.
double at(const std::vector<std::uint16_t>& values, std::int64_t i) {
  return half_bits_to_float(values[static_cast<std::size_t>(i)]);
}

// fp64 y = gelu_erf(x w1) w2 over f16 x [tokens, hidden] and w1 [hidden, inter]; w2 is
// [inter, hidden], or nn.Linear's [hidden, inter] with `w2_out_in`.
std::vector<double> gelu_block_reference(const std::vector<std::uint16_t>& x,
                                         const std::vector<std::uint16_t>& w1,
                                         const std::vector<std::uint16_t>& w2, std::int64_t tokens,
                                         std::int64_t hidden, std::int64_t inter, bool w2_out_in) {
  std::vector<double> y(static_cast<std::size_t>(tokens * hidden)),
      h(static_cast<std::size_t>(inter));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t j = 0; j < inter; ++j) {
      double sum = 0;
      for (std::int64_t k = 0; k < hidden; ++k)
        sum += at(x, t * hidden + k) * at(w1, k * inter + j);
      h[static_cast<std::size_t>(j)] = 0.5 * sum * (1.0 + std::erf(sum / std::sqrt(2.0)));
    }
    for (std::int64_t j = 0; j < hidden; ++j) {
      double sum = 0;
      for (std::int64_t k = 0; k < inter; ++k)
        sum += h[static_cast<std::size_t>(k)] * at(w2, w2_out_in ? j * inter + k : k * hidden + j);
      y[static_cast<std::size_t>(t * hidden + j)] = sum;
    }
  }
  return y;
}

// The relative Frobenius error of f16 `got` against `want`.
double relative_error(const std::vector<std::uint16_t>& got, const std::vector<double>& want) {
  double error = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double value = half_bits_to_float(got[i]);
    error += (value - want[i]) * (value - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(error / norm);
}

}  // namespace

TEST_CASE("a kernel the backend refuses gives way to the next candidate, and the plan says so") {
  auto backend = std::make_shared<RefusingBackend>();
  const auto plan = compile_plan(backend, gemm_graph(), CompileOptions{});
  CHECK(backend->attempts == 2);
  const auto selection = nlohmann::json::parse(plan->description())["steps"][0]["selection"];
  CHECK(selection["kernel"] == "cuda_f32");
  CHECK(selection["why"].get<std::string>().find("(lt_f16 refused by the backend)") !=
        std::string::npos);
  REQUIRE(selection["candidates"].size() == 2);  // only what the backend offers
  const auto& refused = selection["candidates"][0];
  CHECK(refused["kernel"] == "lt_f16");
  CHECK(refused["feasible"] == false);
  CHECK(refused["reason"].get<std::string>().find(
            "the backend refused it: cuBLASLt has no algorithm") != std::string::npos);
}

TEST_CASE("a forced kernel the backend refuses is GE2_ERROR_UNSUPPORTED, never a substitute") {
  auto backend = std::make_shared<RefusingBackend>();
  CompileOptions options;
  options.policy.forced = KernelId::LtF16;
  try {
    (void)compile_plan(backend, gemm_graph(), options);
    FAIL("a refused forced kernel compiled");
  } catch (const Error& e) {
    CHECK(e.status() == GE2_ERROR_UNSUPPORTED);
    CHECK(std::string(e.what()).find("kernel 'lt_f16' was forced but cannot run GEMM 64x16x32") !=
          std::string::npos);
    CHECK(std::string(e.what()).find("cuBLASLt has no algorithm") != std::string::npos);
  }
  CHECK(backend->attempts == 1);
  options.policy.forced = KernelId::CpuRef;  // not offered at all
  CHECK_THROWS_WITH_AS((void)compile_plan(backend, gemm_graph(), options),
                       doctest::Contains("does not offer it (it offers lt_f16, cuda_f32)"), Error);
}

TEST_CASE("a dynamic plan's step list built at an execution gives way to the next candidate too") {
  // lt_f16 runs 8 rows or more: the bound's steps and every bucket's selection
  // use it; extent 3 is refused when its steps are built and runs on cuda_f32.
  auto backend = std::make_shared<RefusingBackend>();
  backend->lt_rows_from = 8;
  const auto plan = compile_plan(backend, gemm_graph(true), CompileOptions{});
  CHECK(plan->max_extent() == 64);
  const auto buckets = nlohmann::json::parse(plan->description())["dynamic"]["buckets"];
  for (const auto& bucket : buckets) CHECK(bucket["gemms"][0]["kernel"] == "lt_f16");
  REQUIRE(backend->tunes.size() == 1);
  CHECK(backend->tunes[0] == TuneUse::AsContext);

  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // f16 buffers of exactly `extent` rows, random values, d poisoned.
  auto run = [&](const Plan& p, std::int64_t extent, std::vector<std::uint16_t>& a,
                 std::vector<std::uint16_t>& b, std::vector<std::uint16_t>& d) {
    a.resize(static_cast<std::size_t>(extent * 32));
    b.resize(32 * 16);
    d.assign(static_cast<std::size_t>(extent * 16), float_to_half_bits(NAN));
    for (auto& v : a) v = float_to_half_bits(dist(rng));
    for (auto& v : b) v = float_to_half_bits(dist(rng));
    const ge2_binding_t bindings[] = {{"a", a.data()}, {"b", b.data()}, {"d", d.data()}};
    const_cast<Plan&>(p).execute_at(extent, bindings, 3, nullptr);
  };
  struct Run {
    std::int64_t extent;
    std::size_t builds;  // make_gemm calls the execution makes
  };
  for (const Run r : {Run{3, 2}, Run{12, 1}, Run{3, 0}}) {
    const std::int64_t extent = r.extent;
    CAPTURE(extent);
    std::vector<std::uint16_t> a, b, d;
    backend->tunes.clear();
    run(*plan, extent, a, b, d);
    double error = 0, norm = 0;
    for (std::int64_t i = 0; i < extent; ++i)
      for (std::int64_t j = 0; j < 16; ++j) {
        double want = 0;
        for (std::int64_t k = 0; k < 32; ++k)
          want += double(half_bits_to_float(a[static_cast<std::size_t>(i * 32 + k)])) *
                  half_bits_to_float(b[static_cast<std::size_t>(k * 16 + j)]);
        const double got = half_bits_to_float(d[static_cast<std::size_t>(i * 16 + j)]);
        error += (got - want) * (got - want);
        norm += want * want;
      }
    CHECK(std::sqrt(error / norm) <= 2e-3);  // f16 output
    // Built at the execution: looked up, never tuned. Extent 3 needs a second
    // try when its steps are built (lt_f16 refused), none once they are kept.
    CHECK(backend->tunes.size() == r.builds);
    for (TuneUse tune : backend->tunes) CHECK(tune == TuneUse::LookupOnly);
  }

  // A forced lt_f16 compiles (the bound runs it) but extent 3 cannot: that
  // execution fails naming the kernel, and nothing runs instead.
  CompileOptions forced;
  forced.policy.forced = KernelId::LtF16;
  const auto forced_plan = compile_plan(backend, gemm_graph(true), forced);
  std::vector<std::uint16_t> a(3 * 32, float_to_half_bits(0.5f)),
      b(32 * 16, float_to_half_bits(0.25f)), d(3 * 16, float_to_half_bits(NAN));
  const ge2_binding_t bindings[] = {{"a", a.data()}, {"b", b.data()}, {"d", d.data()}};
  CHECK_THROWS_WITH_AS(forced_plan->execute_at(3, bindings, 3, nullptr),
                       doctest::Contains("kernel 'lt_f16' was forced but cannot run GEMM 3x16x32"),
                       Error);
  CHECK(std::isnan(half_bits_to_float(d[0])));
}

TEST_CASE("an FP8 row the backend cannot build for the gate is refused with its reason") {
  // cuBLASLt may offer no e4m3 algorithm for the gate's calibration problem: the
  // gate records why and the next candidate (fp32 accumulation) is gated instead;
  // forced, the compile fails naming the kernel and the backend's reason.
  auto backend = std::make_shared<RefusingBackend>();
  backend->offered = {KernelId::LtFp8E4M3Fast, KernelId::LtFp8E4M3, KernelId::LtF16};
  backend->refused = KernelId::LtFp8E4M3Fast;
  Graph g;
  Node d;
  d.kind = OpKind::Gemm;
  // Large enough for the model to rate FP8 faster (the gate runs 256 rows of it).
  d.a = test::add_input(g, "a", TensorType::dense(DType::F16, 2, {4096, 1024, 0}));
  d.b = test::add_input(g, "b", TensorType::dense(DType::F16, 2, {1024, 8192, 0}));
  g.add_output({test::add_node(g, d), "d", std::nullopt});
  CompileOptions options;
  options.policy.allow_fp8 = true;
  const auto plan = compile_plan(backend, g, options);
  const auto text = nlohmann::json::parse(plan->description());
  const auto layers = text["fp8"]["layers"];
  REQUIRE(layers.size() == 2);
  CHECK(layers[0]["kernel"] == "lt_fp8_e4m3_fast");
  CHECK(layers[0]["decision"] == "fallback to lt_fp8_e4m3");
  CHECK(layers[0]["relative_error"] == "not measured");
  CHECK(layers[0]["unsupported"].get<std::string>().find("cuBLASLt has no algorithm") !=
        std::string::npos);
  CHECK(layers[1]["kernel"] == "lt_fp8_e4m3");
  CHECK(layers[1]["decision"] == "kept");
  CHECK(layers[1]["relative_error"].get<double>() > 1e-3);  // e4m3 really ran
  CHECK(text["steps"][0]["selection"]["kernel"] == "lt_fp8_e4m3");

  options.policy.forced = KernelId::LtFp8E4M3Fast;
  CHECK_THROWS_WITH_AS(
      (void)compile_plan(backend, g, options),
      doctest::Contains("kernel 'lt_fp8_e4m3_fast' was forced but cannot run GEMM"), Error);
}

TEST_CASE("a deferred activation whose FP8 GEMM the backend refuses runs as its own pass") {
  // h = gelu(x w1) feeds only y = h w2: with both GEMMs on FP8 rows the first
  // leaves out its activation and the second's quantization applies it. Here the
  // backend builds the FP8 rows for the gate's 256 rows but refuses them at the
  // plan's own: the second GEMM falls back to cuda_f32, which cannot apply it, so
  // h is activated in place by a pass of its own first, and y is still right.
  // (cuda_f32, rated far slower, lets FP8 win at sizes the host checks quickly.)
  auto backend = std::make_shared<RefusingBackend>();
  backend->offered = {KernelId::LtFp8E4M3, KernelId::CudaF32};
  backend->refused = KernelId::CpuRef;  // nothing offered is refused yet
  const std::int64_t tokens = 64, hidden = 128, inter = 256;
  auto block = [&](Activation act, bool dynamic = false) {
    Graph g;
    Node first;
    first.kind = OpKind::Gemm;
    TensorType x_type = TensorType::dense(DType::F16, 2, {tokens, hidden, 0});
    x_type.dynamic = dynamic;
    first.a = test::add_input(g, "x", x_type);
    first.b = test::add_input(g, "w1", TensorType::dense(DType::F16, 2, {hidden, inter, 0}));
    first.act = act;
    const ValueId h = test::add_node(g, first);
    Node second;
    second.kind = OpKind::Gemm;
    second.a = h;
    second.b = test::add_input(g, "w2", TensorType::dense(DType::F16, 2, {inter, hidden, 0}));
    g.add_output({test::add_node(g, second), "y", std::nullopt});
    return g;
  };
  const Graph g = block(Activation::GeluErf);
  CompileOptions options;
  options.policy.allow_fp8 = true;

  std::mt19937 rng(5);
  auto x = random_f16(rng, static_cast<std::size_t>(tokens * hidden), 1.0f);
  auto w1 = random_f16(rng, static_cast<std::size_t>(hidden * inter), 0.0442f);
  auto w2 = random_f16(rng, static_cast<std::size_t>(inter * hidden), 0.0442f);
  const std::vector<double> want = gelu_block_reference(x, w1, w2, tokens, hidden, inter, false);
  // y's relative error against fp64 over the first `rows` tokens (a dynamic plan
  // runs at that extent).
  auto run = [&](const Plan& plan, std::int64_t rows) {
    std::vector<std::uint16_t> y(static_cast<std::size_t>(rows * hidden), float_to_half_bits(NAN));
    const ge2_binding_t bindings[] = {
        {"x", x.data()}, {"w1", w1.data()}, {"w2", w2.data()}, {"y", y.data()}};
    if (plan.max_extent() > 0)
      const_cast<Plan&>(plan).execute_at(rows, bindings, 4, nullptr);
    else
      const_cast<Plan&>(plan).execute(bindings, 4, nullptr);
    return relative_error(y, want);  // y holds the first `rows` tokens
  };

  // Both built: deferred into the second GEMM's quantization.
  const auto kept = compile_plan(backend, g, options);
  auto steps = nlohmann::json::parse(kept->description())["steps"];
  REQUIRE(steps.size() == 2);
  CHECK(steps[0]["selection"]["kernel"] == "lt_fp8_e4m3");
  CHECK(steps[1]["selection"]["kernel"] == "lt_fp8_e4m3");
  CHECK(steps[0]["problem"]["activation"] == "none");
  CHECK(steps[0]["activation"].get<std::string>().find("gelu_erf deferred") != std::string::npos);
  CHECK(steps[1]["input_activation"].get<std::string>().find("applied by the e4m3 quantization") !=
        std::string::npos);
  REQUIRE(backend->problems.size() >= 2);
  CHECK(backend->problems.back().a_act == Activation::GeluErf);
  const double fp8_error = run(*kept, tokens);
  CHECK(fp8_error > 1e-3);  // e4m3 really ran
  CHECK(fp8_error <= 0.06);

  // Refused at the plan's rows: the pass runs on its own before cuda_f32.
  backend->refused = KernelId::LtFp8E4M3;
  backend->refused_rows = tokens;
  backend->problems.clear();
  const auto refused = compile_plan(backend, g, options);
  steps = nlohmann::json::parse(refused->description())["steps"];
  REQUIRE(steps.size() == 2);  // the text names the pass on the GEMM it serves
  CHECK(steps[1]["selection"]["kernel"] == "cuda_f32");
  CHECK(steps[1]["input_activation"].get<std::string>().find(
            "run as its own pass: lt_fp8_e4m3 was refused") != std::string::npos);
  CHECK(backend->problems.back().a_act == Activation::None);
  const double refused_error = run(*refused, tokens);
  CHECK(refused_error <= 2e-3);  // both GEMMs 16-bit now

  // ReLU has a cuBLASLt epilogue: no pass to save, nothing deferred.
  backend->refused = KernelId::CpuRef;
  const auto relu = compile_plan(backend, block(Activation::Relu), options);
  steps = nlohmann::json::parse(relu->description())["steps"];
  REQUIRE(steps.size() == 2);
  CHECK(steps[0]["selection"]["kernel"] == "lt_fp8_e4m3");
  CHECK(steps[1]["selection"]["kernel"] == "lt_fp8_e4m3");
  CHECK(steps[0]["problem"]["activation"] == "relu");
  CHECK_FALSE(steps[0].contains("activation"));
  CHECK_FALSE(steps[1].contains("input_activation"));

  // A dynamic plan decides per step list: extent 5's steps, built at its first
  // execution, have the FP8 row refused and the pass of their own; the bound's
  // and extent 7's defer the activation.
  backend->refused = KernelId::LtFp8E4M3;
  backend->refused_rows = 5;
  const auto dynamic = compile_plan(backend, block(Activation::GeluErf, true), options);
  REQUIRE(dynamic->max_extent() == tokens);
  int builds = 0;
  for (const std::int64_t rows : {tokens, std::int64_t{5}, std::int64_t{7}, std::int64_t{5}}) {
    CAPTURE(rows);
    backend->problems.clear();
    const double error = run(*dynamic, rows);
    if (rows != tokens && !backend->problems.empty())  // built now: the second GEMM's form
      CHECK(backend->problems.back().a_act == (rows == 5 ? Activation::None : Activation::GeluErf));
    if (rows == 5) {
      CHECK(error <= 2e-3);
    } else {
      CHECK(error > 1e-3);
      CHECK(error <= 0.06);
    }
    builds += !backend->problems.empty();
  }
  CHECK(builds == 2);  // extents 5 and 7, once each
}

TEST_CASE(
    "the weight-only FP8 row is gated on slices of 16 rows and never takes a deferred "
    "activation") {
  // h = gelu_erf(x w1) with w1 bound per execution (so on lt_f16, whose erf runs as a
  // pass of its own), y = h w2ᵀ with w2 a constant nn.Linear weight: at 8 tokens the
  // second GEMM takes cuda_skinny_fp8w (emulated on cpu_fp8_ref). It reads h as
  // stored, so the first GEMM keeps its activation; the gate measured 256 rows
  // through 16 steps of 16.
  auto backend = std::make_shared<RefusingBackend>(8);  // 8 SMs: 128 columns fill them
  backend->offered = {KernelId::LtF16, KernelId::CudaSkinnyFp8W, KernelId::CudaF32};
  backend->refused = KernelId::CpuRef;  // nothing offered is refused
  const std::int64_t tokens = 8, hidden = 128, inter = 256;
  std::mt19937 rng(11);
  auto x = random_f16(rng, static_cast<std::size_t>(tokens * hidden), 1.0f);
  auto w1 = random_f16(rng, static_cast<std::size_t>(hidden * inter), 0.0884f);
  const auto w2 =
      random_f16(rng, static_cast<std::size_t>(hidden * inter), 0.0625f);  // [hidden, inter]
  Graph g;
  Node first;
  first.kind = OpKind::Gemm;
  first.a = test::add_input(g, "x", TensorType::dense(DType::F16, 2, {tokens, hidden, 0}));
  first.b = test::add_input(g, "w1", TensorType::dense(DType::F16, 2, {hidden, inter, 0}));
  first.act = Activation::GeluErf;
  const ValueId h = test::add_node(g, first);
  Node weight;
  weight.kind = OpKind::Constant;
  weight.input_name = "w2";
  weight.type = TensorType::dense(DType::F16, 2, {hidden, inter, 0});
  weight.constant_data = std::make_shared<std::vector<unsigned char>>(
      reinterpret_cast<const unsigned char*>(w2.data()),
      reinterpret_cast<const unsigned char*>(w2.data() + w2.size()));
  Node second;
  second.kind = OpKind::Gemm;
  second.a = h;
  second.b = g.add(weight);
  second.gemm.trans_b = true;
  g.add_output({test::add_node(g, second), "y", std::nullopt});
  CompileOptions options;
  options.policy.allow_fp8 = true;
  const auto plan = compile_plan(backend, g, options);
  const auto text = nlohmann::json::parse(plan->description());
  const auto& steps = text["steps"];
  REQUIRE(steps.size() == 2);
  CHECK(steps[0]["selection"]["kernel"] == "lt_f16");
  CHECK(steps[1]["selection"]["kernel"] == "cuda_skinny_fp8w");
  CHECK(steps[0]["problem"]["activation"] == "gelu_erf");  // kept: nothing deferred
  CHECK_FALSE(steps[0].contains("activation"));
  CHECK_FALSE(steps[1].contains("input_activation"));
  const auto& layer = text["fp8"]["layers"][0];
  CHECK(layer["kernel"] == "cuda_skinny_fp8w");
  CHECK(layer["decision"] == "kept");
  CHECK(layer["calibration_rows"] == 256);
  CHECK(layer["scales"].get<std::string>().find("the activation stays 16-bit") !=
        std::string::npos);
  int slices = 0, plan_steps = 0;
  for (const GemmProblem& p : backend->problems) {
    if (p.n != hidden) continue;
    CHECK(p.a_act == Activation::None);
    slices += p.m == 16;
    plan_steps += p.m == tokens;
  }
  CHECK(slices == 16);
  CHECK(plan_steps == 1);

  std::vector<std::uint16_t> y(static_cast<std::size_t>(tokens * hidden), float_to_half_bits(NAN));
  const ge2_binding_t bindings[] = {{"x", x.data()}, {"w1", w1.data()}, {"y", y.data()}};
  plan->execute(bindings, 3, nullptr);
  const double relative =
      relative_error(y, gelu_block_reference(x, w1, w2, tokens, hidden, inter, true));
  CHECK(relative > 1e-3);  // e4m3 really ran
  CHECK(relative <= 0.06);
}

TEST_CASE("a SwiGLU block at decode sizes runs its joined gate/up GEMM on the weight-only row") {
  // y = (silu(x wgᵀ) * (x wuᵀ)) w2ᵀ, nn.Linear constants, 8 tokens: the gate and up
  // GEMMs join into one of twice the width, which cuda_skinny_fp8w (no gated epilogue)
  // runs before a gated_mul pass; the down projection runs on it too.
  auto backend = std::make_shared<RefusingBackend>(8);
  backend->offered = {KernelId::LtF16, KernelId::CudaSkinnyFp8W, KernelId::CudaF32};
  backend->refused = KernelId::CpuRef;
  const std::int64_t tokens = 8, hidden = 128, inter = 192;
  std::mt19937 rng(13);
  auto x = random_f16(rng, static_cast<std::size_t>(tokens * hidden), 1.0f);
  const auto wg = random_f16(rng, static_cast<std::size_t>(inter * hidden), 0.0884f);
  const auto wu = random_f16(rng, static_cast<std::size_t>(inter * hidden), 0.0884f);
  const auto w2 = random_f16(rng, static_cast<std::size_t>(hidden * inter), 0.0722f);
  Graph g;
  auto constant = [&](const char* name, const std::vector<std::uint16_t>& values, std::int64_t rows,
                      std::int64_t cols) {
    Node n;
    n.kind = OpKind::Constant;
    n.input_name = name;
    n.type = TensorType::dense(DType::F16, 2, {rows, cols, 0});
    n.constant_data = std::make_shared<std::vector<unsigned char>>(
        reinterpret_cast<const unsigned char*>(values.data()),
        reinterpret_cast<const unsigned char*>(values.data() + values.size()));
    return g.add(n);
  };
  const ValueId vx = test::add_input(g, "x", TensorType::dense(DType::F16, 2, {tokens, hidden, 0}));
  Node gated;
  gated.kind = OpKind::Mul;
  gated.x = linear(g, vx, constant("wg", wg, inter, hidden));
  gated.y = linear(g, vx, constant("wu", wu, inter, hidden));
  gated.act = Activation::Silu;
  const ValueId m = test::add_node(g, gated);
  g.add_output({linear(g, m, constant("w2", w2, hidden, inter)), "y", std::nullopt});
  CompileOptions options;
  options.policy.allow_fp8 = true;
  const auto plan = compile_plan(backend, g, options);
  const auto text = nlohmann::json::parse(plan->description());
  std::vector<std::string> ops, kernels;
  for (const auto& step : text["steps"]) {
    ops.push_back(step["op"]);
    if (step.contains("selection")) kernels.push_back(step["selection"]["kernel"]);
  }
  CHECK(ops == std::vector<std::string>{"gemm", "gated_mul", "gemm"});
  CHECK(kernels == std::vector<std::string>{"cuda_skinny_fp8w", "cuda_skinny_fp8w"});
  for (const auto& layer : text["fp8"]["layers"]) CHECK(layer["decision"] == "kept");

  std::vector<std::uint16_t> y(static_cast<std::size_t>(tokens * hidden), float_to_half_bits(NAN));
  const ge2_binding_t bindings[] = {{"x", x.data()}, {"y", y.data()}};
  plan->execute(bindings, 2, nullptr);
  std::vector<double> want(y.size()), h(static_cast<std::size_t>(inter));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t j = 0; j < inter; ++j) {
      double gate = 0, up = 0;
      for (std::int64_t k = 0; k < hidden; ++k) {
        gate += at(x, t * hidden + k) * at(wg, j * hidden + k);
        up += at(x, t * hidden + k) * at(wu, j * hidden + k);
      }
      h[static_cast<std::size_t>(j)] = gate / (1.0 + std::exp(-gate)) * up;
    }
    for (std::int64_t j = 0; j < hidden; ++j) {
      double sum = 0;
      for (std::int64_t k = 0; k < inter; ++k)
        sum += h[static_cast<std::size_t>(k)] * at(w2, j * inter + k);
      want[static_cast<std::size_t>(t * hidden + j)] = sum;
    }
  }
  // The emulation (cpu_fp8_ref) rounds A to e4m3 too, three GEMMs deep, and gate * up
  // multiplies two rounded sums: 0.065 here, where one such layer stays under 0.06.
  const double error = relative_error(y, want);
  CHECK(error > 1e-3);  // e4m3 really ran
  CHECK(error <= 0.1);
}

TEST_CASE("weights given in e4m3 take the weight-only row without allow_fp8, read as given") {
  // The SwiGLU block above with its three nn.Linear weights given in e4m3 (per output
  // channel, per tensor): at 8 tokens every GEMM takes cuda_skinny_fp8w with no
  // precision option, the joined gate/up weight carries the joined bytes and scales,
  // and nothing is gated. Scales along K, or 64 tokens, leave the 16-bit kernels.
  const std::int64_t hidden = 128, inter = 192;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto codes = [&](std::int64_t count) {
    std::vector<std::uint8_t> c(static_cast<std::size_t>(count));
    for (auto& code : c) code = float_to_e4m3_bits(normal(rng) * 64.0f);
    return c;
  };
  const auto wg = codes(inter * hidden), wu = codes(inter * hidden), w2 = codes(hidden * inter);
  std::vector<float> wg_scales(static_cast<std::size_t>(inter)),
      wu_scales(static_cast<std::size_t>(inter));
  for (auto& v : wg_scales) v = 0.0884f / 64 * (1.0f + 0.5f * std::abs(normal(rng)));
  for (auto& v : wu_scales) v = 0.0884f / 64 * (1.0f + 0.5f * std::abs(normal(rng)));
  const float w2_scale = 0.0722f / 64;
  const ge2_tensor_desc_t d_in{GE2_DTYPE_F16, 2, {inter, hidden}, {}};
  const ge2_tensor_desc_t d_out{GE2_DTYPE_F16, 2, {hidden, inter}, {}};
  auto build = [&](std::int64_t tokens, int up_axis) {
    Graph g;
    auto quantized = [&](const char* name, const ge2_tensor_desc_t& desc,
                         const std::vector<std::uint8_t>& data, const float* scales,
                         std::int64_t count, int axis) {
      QuantizedConstantArgs args;
      args.value = tensor_type_from_desc(desc, "test");
      args.storage_dtype = GE2_DTYPE_F8_E4M3;
      args.data = data.data();
      args.scales = scales;
      args.scale_count = count;
      args.scale_axis = axis;
      return g.add(make_quantized_constant(args, name, "test"));
    };
    const ValueId vx =
        test::add_input(g, "x", TensorType::dense(DType::F16, 2, {tokens, hidden, 0}));
    const std::vector<float> k_scales(static_cast<std::size_t>(hidden), wu_scales[0]);
    Node gated;
    gated.kind = OpKind::Mul;
    gated.x = linear(g, vx, quantized("wg", d_in, wg, wg_scales.data(), inter, 0));
    gated.y = linear(g, vx,
                     up_axis == 0 ? quantized("wu", d_in, wu, wu_scales.data(), inter, 0)
                                  : quantized("wu", d_in, wu, k_scales.data(), hidden, 1));
    gated.act = Activation::Silu;
    const ValueId m = test::add_node(g, gated);
    g.add_output({linear(g, m, quantized("w2", d_out, w2, &w2_scale, 1, -1)), "y", std::nullopt});
    return g;
  };
  auto kernels_of = [](const nlohmann::json& text) {
    std::vector<std::string> kernels;
    for (const auto& step : text["steps"])
      if (step.contains("selection")) kernels.push_back(step["selection"]["kernel"]);
    return kernels;
  };

  auto backend = std::make_shared<RefusingBackend>(8);
  backend->offered = {KernelId::LtF16, KernelId::CudaSkinnyFp8W, KernelId::CudaF32};
  backend->refused = KernelId::CpuRef;
  const auto plan = compile_plan(backend, build(8, 0), CompileOptions{});
  const auto text = nlohmann::json::parse(plan->description());
  CHECK(kernels_of(text) == std::vector<std::string>{"cuda_skinny_fp8w", "cuda_skinny_fp8w"});
  for (const auto& step : text["steps"])
    if (step.contains("selection"))
      CHECK(step["selection"]["why"].get<std::string>().find("weight given in e4m3") == 0);
  CHECK(text["fp8"]["allow_fp8"] == false);
  CHECK_FALSE(text["fp8"].contains("calibration"));
  REQUIRE(text["fp8"]["layers"].size() == 2);
  for (const auto& layer : text["fp8"]["layers"]) {
    CHECK(layer["decision"].get<std::string>().find("kept: the weight is given in e4m3") == 0);
    CHECK_FALSE(layer.contains("relative_error"));  // not gated
  }
  // The gate never ran (it would build 16 slices of 16 rows), and the copies were made
  // of the given bytes: the joined gate/up weight is [wg; wu] with both scale vectors.
  for (const GemmProblem& p : backend->problems) CHECK(p.m == 8);
  REQUIRE(backend->prepared.size() == 2);
  const QuantizedData& joined = backend->prepared[0].given;
  CHECK(backend->prepared[0].problem.b_e4m3);
  CHECK(joined.rows == 2 * inter);
  CHECK(joined.scales_text() == "one scale per row");
  std::vector<std::uint8_t> both = wg;
  both.insert(both.end(), wu.begin(), wu.end());
  CHECK(joined.data == both);
  std::vector<float> both_scales = wg_scales;
  both_scales.insert(both_scales.end(), wu_scales.begin(), wu_scales.end());
  CHECK(joined.scales == both_scales);
  const QuantizedData& down = backend->prepared[1].given;
  CHECK(down.data == w2);
  CHECK(down.scales_text() == "one scale");  // the backend repeats it per channel
  CHECK(down.scales == std::vector<float>{w2_scale});

  // x through the plan against fp64 on the given weights (e4m3 * scale).
  const std::int64_t tokens = 8;
  auto x = random_f16(rng, static_cast<std::size_t>(tokens * hidden), 1.0f);
  std::vector<std::uint16_t> y(static_cast<std::size_t>(tokens * hidden), float_to_half_bits(NAN));
  const ge2_binding_t bindings[] = {{"x", x.data()}, {"y", y.data()}};
  plan->execute(bindings, 2, nullptr);
  auto weight = [](const std::vector<std::uint8_t>& c, std::int64_t i, double scale) {
    return static_cast<double>(e4m3_bits_to_float(c[static_cast<std::size_t>(i)])) * scale;
  };
  std::vector<double> want(y.size()), h(static_cast<std::size_t>(inter));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t j = 0; j < inter; ++j) {
      double gate = 0, up = 0;
      for (std::int64_t k = 0; k < hidden; ++k) {
        gate += at(x, t * hidden + k) *
                weight(wg, j * hidden + k, wg_scales[static_cast<std::size_t>(j)]);
        up += at(x, t * hidden + k) *
              weight(wu, j * hidden + k, wu_scales[static_cast<std::size_t>(j)]);
      }
      h[static_cast<std::size_t>(j)] = gate / (1.0 + std::exp(-gate)) * up;
    }
    for (std::int64_t j = 0; j < hidden; ++j) {
      double sum = 0;
      for (std::int64_t k = 0; k < inter; ++k)
        sum += h[static_cast<std::size_t>(k)] * weight(w2, j * inter + k, w2_scale);
      want[static_cast<std::size_t>(t * hidden + j)] = sum;
    }
  }
  // cpu_fp8_ref re-rounds the (16-bit) weight and A to e4m3: the bound of the block above.
  CHECK(relative_error(y, want) <= 0.1);

  // Scales along K on one half: the joined weight has no e4m3 form, so the first GEMM
  // stays 16-bit (FP8 is not allowed) and the pass says why; the down projection keeps it.
  auto k_backend = std::make_shared<RefusingBackend>(8);
  k_backend->offered = backend->offered;
  k_backend->refused = KernelId::CpuRef;
  const auto k_plan = compile_plan(k_backend, build(8, 1), CompileOptions{});
  const auto k_text = nlohmann::json::parse(k_plan->description());
  CHECK(kernels_of(k_text) == std::vector<std::string>{"lt_f16", "cuda_skinny_fp8w"});
  CHECK(k_text.dump().find("has no quantized form") != std::string::npos);
  CHECK(k_text["steps"][0]["selection"]["candidates"].dump().find("FP8 not allowed") !=
        std::string::npos);

  // 64 tokens: past the row's 16, the 16-bit kernels read the dequantized value.
  auto wide_backend = std::make_shared<RefusingBackend>(8);
  wide_backend->offered = backend->offered;
  wide_backend->refused = KernelId::CpuRef;
  const auto wide = compile_plan(wide_backend, build(64, 0), CompileOptions{});
  CHECK(kernels_of(nlohmann::json::parse(wide->description())) ==
        std::vector<std::string>{"lt_f16", "lt_f16"});
  CHECK(wide_backend->prepared.empty());

  // A backend whose weight-only row reads only its e4m3 copy: the fixed plan releases the
  // 16-bit values every reader of which runs there (all three weights here), not under
  // allow_fp8 (the gate reads them) nor in a dynamic plan (other buckets read them).
  auto released_constants = [&](bool allow_fp8, bool dynamic, int up_axis) {
    auto only = std::make_shared<RefusingBackend>(8);
    only->offered = backend->offered;
    only->refused = KernelId::CpuRef;
    only->prepared_only = true;
    Graph g = build(8, up_axis);
    if (dynamic) g.node(0).type.dynamic = true;
    CompileOptions options;
    options.policy.allow_fp8 = allow_fp8;
    const auto text = nlohmann::json::parse(compile_plan(only, g, options)->description());
    std::vector<std::string> names;
    for (const auto& constant : text["constants"])
      if (constant.contains("released")) names.push_back(constant["name"]);
    if (names.size() == text["constants"].size()) CHECK(text["constant_bytes"] == 0);
    return names;
  };
  CHECK(released_constants(false, false, 0) == std::vector<std::string>{"wg+wu", "w2"});
  CHECK(released_constants(false, false, 1) ==
        std::vector<std::string>{"w2"});  // lt_f16 reads wg+wu
  CHECK(released_constants(true, false, 0).empty());
  CHECK(released_constants(false, true, 0).empty());
}

TEST_CASE("weights given with block scales: the weight-only row reads the blocks, others say why") {
  // The SwiGLU block of the case above with every weight given in 64 x 64 blocks of
  // scales (checkpoints use 128 x 128): at 8 tokens each GEMM takes cuda_skinny_fp8w,
  // whose copy is made of the given grid (the gate/up halves' grids joined, the
  // blocks in op(B)^T's orientation); blocks of 32 along K, which the kernel's steps
  // of 64 k cannot scale, and the row-wise rows under allow_fp8, which read one scale
  // per channel, are refused naming the blocks.
  const std::int64_t hidden = 128, inter = 192;
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto block_constant = [&](Graph& g, const char* name, std::int64_t rows, std::int64_t cols,
                            std::int64_t block_rows, std::int64_t block_cols) {
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols));
    for (auto& code : codes) code = float_to_e4m3_bits(normal(rng) * 64.0f);
    const std::int64_t count =
        ((rows + block_rows - 1) / block_rows) * ((cols + block_cols - 1) / block_cols);
    std::vector<float> scales(static_cast<std::size_t>(count));
    for (auto& s : scales) s = 0.0884f / 64 * (0.5f + std::abs(normal(rng)));
    QuantizedConstantArgs args;
    args.value = TensorType::dense(DType::F16, 2, {rows, cols, 0});
    args.storage_dtype = GE2_DTYPE_F8_E4M3;
    args.data = codes.data();
    args.scales = scales.data();
    args.scale_count = count;
    args.block = std::array<std::int64_t, 2>{block_rows, block_cols};
    return std::pair{g.add(make_quantized_constant(args, name, "test")), scales};
  };
  struct Built {
    Graph graph;
    std::vector<float> wg_scales, wu_scales, w2_scales;
  };
  // h, i: hidden and intermediate sizes (0: the case's).
  auto build = [&](std::int64_t tokens, std::int64_t block_k, std::int64_t block_n = 64,
                   std::int64_t h = 0, std::int64_t i = 0) {
    if (h == 0) h = hidden;
    if (i == 0) i = inter;
    Built b;
    const ValueId vx =
        test::add_input(b.graph, "x", TensorType::dense(DType::F16, 2, {tokens, h, 0}));
    const auto wg = block_constant(b.graph, "wg", i, h, block_n, block_k);
    const auto wu = block_constant(b.graph, "wu", i, h, block_n, block_k);
    const auto w2 = block_constant(b.graph, "w2", h, i, block_n, block_k);
    b.wg_scales = wg.second, b.wu_scales = wu.second, b.w2_scales = w2.second;
    Node gated;
    gated.kind = OpKind::Mul;
    gated.x = linear(b.graph, vx, wg.first);
    gated.y = linear(b.graph, vx, wu.first);
    gated.act = Activation::Silu;
    const ValueId m = test::add_node(b.graph, gated);
    b.graph.add_output({linear(b.graph, m, w2.first), "y", std::nullopt});
    return b;
  };
  auto selections = [](const nlohmann::json& text) {
    std::vector<nlohmann::json> list;
    for (const auto& step : text["steps"])
      if (step.contains("selection")) list.push_back(step["selection"]);
    return list;
  };

  auto backend = std::make_shared<RefusingBackend>(8);
  backend->offered = {KernelId::LtF16, KernelId::CudaSkinnyFp8W, KernelId::CudaF32};
  backend->refused = KernelId::CpuRef;
  const Built built = build(8, 64);
  const auto text =
      nlohmann::json::parse(compile_plan(backend, built.graph, CompileOptions{})->description());
  for (const auto& selection : selections(text)) CHECK(selection["kernel"] == "cuda_skinny_fp8w");
  REQUIRE(backend->prepared.size() == 2);
  const auto& [joined_problem, joined] = backend->prepared[0];
  CHECK(joined_problem.b_e4m3);
  CHECK(joined_problem.b_scale_block_n == 64);
  CHECK(joined_problem.b_scale_block_k == 64);
  // K blocks padded to 4 (16 bytes) per N block: the layout cuBLASLt's block mode reads.
  CHECK(fp8_weight_scale_count(joined_problem) == (2 * inter / 64) * fp8_scale_ld(hidden / 64));
  CHECK(joined.scales_text() == "one scale per 64x64 block");
  std::vector<float> both = built.wg_scales;
  both.insert(both.end(), built.wu_scales.begin(), built.wu_scales.end());
  CHECK(joined.scales == both);  // [wg; wu]: the gate's block rows, then the up's
  CHECK(backend->prepared[1].given.scales == built.w2_scales);
  bool described = false;
  for (const auto& constant : text["constants"])
    described |= constant["given_as"] ==
                 "f8_e4m3 with one scale per 64x64 block (the FP8 rows "
                 "read these bytes; other kernels the value above)";
  CHECK(described);
  CHECK(text["fp8"]["layers"][0]["scales"].get<std::string>().find("one scale per 64x64 block") !=
        std::string::npos);

  // Blocks of 32 along K: the 16-bit kernels, and the plan says why.
  auto narrow = std::make_shared<RefusingBackend>(8);
  narrow->offered = backend->offered;
  narrow->refused = KernelId::CpuRef;
  const auto narrow_text = nlohmann::json::parse(
      compile_plan(narrow, build(8, 32).graph, CompileOptions{})->description());
  for (const auto& selection : selections(narrow_text)) {
    CHECK(selection["kernel"] == "lt_f16");
    CHECK(selection["candidates"].dump().find(
              "per 64x32 block of op(B)^T; it takes blocks of 64 times a power of two along K") !=
          std::string::npos);
  }
  CHECK(narrow->prepared.empty());

  // One dynamic plan to 64 tokens: buckets up to 16 rows read the blocks, the others the
  // 16-bit value, which the plan therefore keeps.
  auto dynamic = std::make_shared<RefusingBackend>(8);
  dynamic->offered = backend->offered;
  dynamic->refused = KernelId::CpuRef;
  dynamic->prepared_only = true;
  Built bound = build(64, 64);
  bound.graph.node(0).type.dynamic = true;
  const auto dynamic_text =
      nlohmann::json::parse(compile_plan(dynamic, bound.graph, CompileOptions{})->description());
  int e4m3_buckets = 0;
  for (const auto& bucket : dynamic_text["dynamic"]["buckets"]) {
    const bool decode = bucket["last"].get<std::int64_t>() <= 16;
    e4m3_buckets += decode;
    for (const auto& gemm : bucket["gemms"])
      CHECK(gemm["kernel"] == (decode ? "cuda_skinny_fp8w" : "lt_f16"));
  }
  CHECK(e4m3_buckets == 5);  // 1, 2, 3-4, 5-8, 9-16
  for (const auto& constant : dynamic_text["constants"]) CHECK_FALSE(constant.contains("released"));

  // Under allow_fp8 at 64 tokens the cuBLASLt FP8 rows are not offered such a weight:
  // lt_fp8_e4m3's block mode takes 128 x 128 blocks only, the fast row none.
  auto wide = std::make_shared<RefusingBackend>(8);
  wide->offered = {KernelId::LtFp8E4M3, KernelId::LtFp8E4M3Fast, KernelId::LtF16,
                   KernelId::CudaSkinnyFp8W};
  wide->refused = KernelId::CpuRef;
  CompileOptions fp8;
  fp8.policy.allow_fp8 = true;
  const auto wide_text =
      nlohmann::json::parse(compile_plan(wide, build(64, 64).graph, fp8)->description());
  for (const auto& selection : selections(wide_text)) {
    CHECK(selection["kernel"] == "lt_f16");
    CHECK(selection["candidates"].dump().find(
              "given in e4m3 with a scale per 64x64 block of op(B)^T; this row reads blocks of "
              "128x128 only (cuBLASLt's block-scale mode)") != std::string::npos);
    CHECK(selection["candidates"].dump().find(
              "given in e4m3 with a scale per 64x64 block of op(B)^T; this row reads one scale "
              "per output channel (cuBLASLt has no fast accumulation with block scales)") !=
          std::string::npos);
  }

  // In 128 x 128 blocks, lt_fp8_e4m3 takes them in cuBLASLt's block-scale mode, A per
  // row and 128 k (forced here: the model prefers 16 bits at this size), and the emulation
  // (cpu_fp8_ref) passes the gate. Hidden 512, intermediate 640 (five blocks, so the
  // gate/up halves join on a block boundary into one grid); the down projection's K = 640
  // is not a multiple of 512, which the mode refuses until its layouts are probed.
  auto blocked = std::make_shared<RefusingBackend>(8);
  blocked->offered = wide->offered;
  blocked->refused = KernelId::CpuRef;
  const auto blocked_text = nlohmann::json::parse(
      compile_plan(blocked, build(64, 128, 128, 512, 640).graph, fp8)->description());
  const auto blocked_selections = selections(blocked_text);
  REQUIRE(blocked_selections.size() == 2);
  CHECK(blocked_selections[1]["candidates"].dump().find(
            "the block-scale mode takes K a multiple of 512 (the weight's scale grid), K = 640") !=
        std::string::npos);
  CompileOptions forced = fp8;
  forced.policy.forced = KernelId::LtFp8E4M3;
  auto square = std::make_shared<RefusingBackend>(8);
  square->offered = wide->offered;
  square->refused = KernelId::CpuRef;
  const auto square_text = nlohmann::json::parse(
      compile_plan(square, build(64, 128, 128, 512, 512).graph, forced)->description());
  for (const auto& selection : selections(square_text)) CHECK(selection["kernel"] == "lt_fp8_e4m3");
  const auto& layers = square_text["fp8"]["layers"];
  REQUIRE(layers.size() == 2);
  for (const auto& layer : layers) {
    CHECK(layer["decision"] == "kept");
    CHECK(layer["scales"].get<std::string>().find(
              "one scale per 128x128 block of the weight as stored); per row and 128 columns of "
              "the activation") != std::string::npos);
  }
  REQUIRE(square->prepared.size() == 2);
  const GemmProblem& joined_blocks = square->prepared[0].problem;
  CHECK(fp8_block_scaled(joined_blocks));
  CHECK(joined_blocks.n == 1024);
  CHECK(fp8_weight_scale_count(joined_blocks) == 8 * fp8_scale_ld(4));
  // The scratch holds A's codes and its scales per row and k block.
  CHECK(fp8_scratch_bytes(joined_blocks, true) ==
        fp8_scales_bytes(64 * 4) + fp8_operand_bytes(64, 512) - fp8_scales_bytes(64));
  // 62 tokens: not a multiple of 4, refused naming M.
  auto odd = std::make_shared<RefusingBackend>(8);
  odd->offered = wide->offered;
  odd->refused = KernelId::CpuRef;
  const auto odd_text = nlohmann::json::parse(
      compile_plan(odd, build(62, 128, 128, 512, 512).graph, fp8)->description());
  for (const auto& selection : selections(odd_text))
    CHECK(selection["candidates"].dump().find(
              "the block-scale mode takes M a multiple of 4 (A's scales per 128 k), M = 62") !=
          std::string::npos);
}
