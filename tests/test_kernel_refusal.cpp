// A backend that cannot build the kernel the selector ranked first: the plan
// takes the next candidate and says so, and a forced kernel is never replaced.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "exec/backend.hpp"
#include "exec/plan.hpp"

using namespace ge2;

namespace {

// Poses as a Hopper GPU offering lt_f16 and cuda_f32; refuses lt_f16 as a
// cuBLASLt without an algorithm would, and runs cuda_f32 on the CPU reference.
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
  std::span<const KernelId> gemm_kernels() const override {
    static constexpr KernelId kOffered[] = {KernelId::LtF16, KernelId::CudaF32};
    return kOffered;
  }
  std::unique_ptr<Step> make_gemm(const GemmProblem& problem, const GemmSlots& slots,
                                  KernelId kernel, bool staged, TuneUse tune) override {
    ++attempts;
    require(kernel != KernelId::LtF16, GE2_ERROR_UNSUPPORTED,
            "cuBLASLt has no algorithm for this problem (test)");
    return cpu_->make_gemm(problem, slots, KernelId::CpuRef, staged, tune);
  }
  std::unique_ptr<Step> make_elementwise(const ElementwiseProblem& problem,
                                         const ElementwiseSlots& slots) override {
    return cpu_->make_elementwise(problem, slots);
  }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override { return cpu_->allocate(bytes); }
  void upload(Buffer& destination, const void* host, std::size_t bytes) override {
    cpu_->upload(destination, host, bytes);
  }
  void execute(const std::vector<std::unique_ptr<Step>>& steps, ExecState& state,
               const std::vector<std::size_t>& io_bytes,
               const std::vector<bool>& io_is_output) override {
    cpu_->execute(steps, state, io_bytes, io_is_output);
  }
  int attempts = 0;

 private:
  DeviceInfo device_;
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

Graph gemm_graph() {
  Graph g;
  Node a, b, d;
  a.kind = b.kind = OpKind::Input;
  a.input_name = "a";
  b.input_name = "b";
  a.type = TensorType::dense(DType::F16, 2, {64, 32, 0});
  b.type = TensorType::dense(DType::F16, 2, {32, 16, 0});
  const ValueId va = g.add(a), vb = g.add(b);
  d.kind = OpKind::Gemm;
  d.a = va;
  d.b = vb;
  d.type = infer_node_type(g, d, "test");
  g.add_output({g.add(d), "d", std::nullopt});
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
