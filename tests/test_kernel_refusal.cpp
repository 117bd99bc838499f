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
#include "support/ir_builders.hpp"

using namespace ge2;

namespace {

// Poses as a Hopper GPU offering `offered` (lt_f16 and cuda_f32 unless a test
// says otherwise); refuses `refused` as a cuBLASLt without an algorithm would,
// and runs every other kernel on the CPU reference (the FP8 rows on cpu_fp8_ref).
class RefusingBackend final : public Backend {
 public:
  RefusingBackend() {
    device_.has_cuda = true;
    device_.cc_major = 9;
    device_.sm_count = 132;
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
    require(kernel != refused || problem.m >= lt_rows_from, GE2_ERROR_UNSUPPORTED,
            "cuBLASLt has no algorithm for this problem (test)");
    return cpu_->make_gemm(problem, slots,
                           is_fp8_kernel(kernel) ? KernelId::CpuFp8Ref : KernelId::CpuRef, staged,
                           tune);
  }
  std::unique_ptr<Step> make_elementwise(const ElementwiseProblem& problem,
                                         const ElementwiseSlots& slots) override {
    return cpu_->make_elementwise(problem, slots);
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
