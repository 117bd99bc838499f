// GPU tests of the dynamic extent: one FFN plan per block runs every token
// count 1..300 and a spread to its bound against fp64 (buffers of exactly that
// many rows), eagerly and with graph replay; the tuning mode tunes each bucket
// at compile and never during an execution; executions of one plan at
// different extents on two streams stay ordered.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#ifdef GE2_TEST_WITH_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>

#include "support/gpu_helpers.hpp"
#include "support/scratch_dir.hpp"

using namespace ge2::test;

namespace {

// "first-last: kernel, kernel" per bucket, for the test log.
std::string bucket_table(const ge2_plan_t* plan) {
  const char* text = nullptr;
  REQUIRE(ge2_plan_describe(plan, &text) == GE2_OK);
  std::string table;
  const auto description = nlohmann::json::parse(text);  // a range-for keeps no temporary alive
  for (const auto& bucket : description["dynamic"]["buckets"]) {
    table += fmt::format("\n  {}-{}:", bucket["first"].get<std::int64_t>(),
                         bucket["last"].get<std::int64_t>());
    for (const auto& gemm : bucket["gemms"]) table += " " + gemm["kernel"].get<std::string>();
  }
  return table;
}

std::int64_t tuned_in_this_process(ge2_context_t* context) {
  const char* text = nullptr;
  REQUIRE(ge2_context_describe(context, &text) == GE2_OK);
  return nlohmann::json::parse(text)["tuning"]["tuned_in_this_process"];
}

}  // namespace

TEST_CASE("gpu dynamic: one FFN plan runs token counts 1..300 and a spread to its bound") {
  auto context = make_context(GE2_DEVICE_CUDA);
  DeviceMemory memory;
  for (bool replay : {false, true}) {
    CAPTURE(replay);
    DynamicFfn gelu(context.get(), GE2_DTYPE_F16, FfnKind::GeluMlp, 1024, 128, 256, true, replay);
    for (std::int64_t tokens = 1; tokens <= 300; ++tokens)
      CHECK(gelu.run(memory, tokens) <= gpu_tolerance(GE2_DTYPE_F16, nullptr));
    for (std::int64_t tokens : {1024, 700, 513, 512, 3, 1})
      CHECK(gelu.run(memory, tokens) <= gpu_tolerance(GE2_DTYPE_F16, nullptr));
  }
}

TEST_CASE("gpu dynamic: wide blocks in f16 and bf16 at a spread of token counts") {
  auto context = make_context(GE2_DEVICE_CUDA);
  DeviceMemory memory;
  // Layers wide enough for every kernel family to be a candidate (cuda_skinny
  // needs half the SMs busy), in both 16-bit types, with the gated form.
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16})
    for (FfnKind kind : {FfnKind::GeluMlp, FfnKind::SwiGlu}) {
      CAPTURE(dtype);
      DynamicFfn ffn(context.get(), dtype, kind, 1024, 256, 1408, kind == FfnKind::SwiGlu);
      const std::string label = std::string(kind == FfnKind::SwiGlu ? "swiglu " : "gelu ") +
                                (dtype == GE2_DTYPE_F16 ? "f16" : "bf16");
      MESSAGE("buckets of " << label << bucket_table(ffn.plan.get()));
      for (std::int64_t tokens : {1, 2, 3, 5, 8, 9, 17, 64, 100, 256, 257, 700, 1024})
        CHECK(ffn.run(memory, tokens) <= gpu_tolerance(dtype, nullptr));
    }
}

TEST_CASE("gpu dynamic: the tuning mode tunes each bucket at compile, executions never tune") {
  const std::string db = (scratch_subdir("gpu-dynamic-tune") / "tunedb.sqlite").string();
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_TUNE, db);
    DeviceMemory memory;
    DynamicFfn ffn(context.get(), GE2_DTYPE_F16, FfnKind::GeluMlp, 300, 256, 1024, true);
    const std::int64_t tuned = tuned_in_this_process(context.get());
    MESSAGE("kernels tuned at compile: " << tuned << bucket_table(ffn.plan.get()));
    CHECK(tuned > 0);
    for (std::int64_t tokens : {1, 3, 7, 100, 255, 299, 300})
      CHECK(ffn.run(memory, tokens) <= gpu_tolerance(GE2_DTYPE_F16, nullptr));
    CHECK(tuned_in_this_process(context.get()) == tuned);
  }
}

TEST_CASE("gpu dynamic: host pointers at an extent are staged with that extent's bytes") {
  auto context = make_context(GE2_DEVICE_CUDA);
  auto memory = host_memory();  // host pointers on a CUDA context: staged through device memory
  DynamicFfn ffn(context.get(), GE2_DTYPE_BF16, FfnKind::GeluMlp, 600, 64, 192, true);
  for (std::int64_t tokens : {1, 9, 333, 600, 2})
    CHECK(ffn.run(*memory, tokens) <= gpu_tolerance(GE2_DTYPE_BF16, nullptr));
}

TEST_CASE("gpu dynamic: executions at different extents on two streams stay ordered") {
  auto context = make_context(GE2_DEVICE_CUDA);
  DeviceMemory memory;
  DynamicFfn ffn(context.get(), GE2_DTYPE_F16, FfnKind::SwiGlu, 512, 256, 512, true);
  cudaStream_t streams[2];
  for (auto& s : streams) REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == 0);
  const std::int64_t extents[2] = {7, 500};
  std::vector<HostTensor> xs, ys;
  std::vector<void*> x_data, y_data;
  for (std::int64_t extent : extents) {
    xs.push_back(make_tensor(GE2_DTYPE_F16, {extent, 256}));
    fill_random(xs.back());
    ys.push_back(make_tensor(GE2_DTYPE_F16, {extent, 256}));
    poison(ys.back());
    x_data.push_back(memory.upload(xs.back()));
    y_data.push_back(memory.upload(ys.back()));
  }
  for (int round = 0; round < 20; ++round)
    for (int i = 0; i < 2; ++i) {
      const ge2_binding_t bindings[] = {{"x", x_data[i]}, {"y", y_data[i]}};
      GE2_CHECK(ge2_plan_execute_dynamic(ffn.plan.get(), extents[i], bindings, 2, streams[i]));
    }
  for (int i = 0; i < 2; ++i) {
    memory.download(y_data[i], ys[i]);
    CHECK(relative_error(ys[i], ffn_reference(ffn.kind, true, xs[i], ffn.weights)) <=
          gpu_tolerance(GE2_DTYPE_F16, nullptr));
  }
  for (auto& s : streams) cudaStreamDestroy(s);
}
#endif  // GE2_TEST_WITH_CUDA
