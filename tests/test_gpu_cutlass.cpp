// GPU tests of the CUTLASS kernel family: every configuration x dtype x
// epilogue against fp64, with partial tiles, padded rows, batches, C with beta,
// unaligned pointers and the layouts the family refuses.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#ifdef GE2_TEST_WITH_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <tuple>

#include "support/gpu_helpers.hpp"
#include "support/scratch_dir.hpp"
#include "tunedb/tunedb.hpp"

using namespace ge2::test;

namespace {

struct CutlassKernel {
  const char* name;
  ge2_dtype_t dtype;
};
constexpr CutlassKernel kCutlassKernels[] = {
    {"cutlass_f16_128x256", GE2_DTYPE_F16},  {"cutlass_f16_64x128", GE2_DTYPE_F16},
    {"cutlass_f16_128x128", GE2_DTYPE_F16},  {"cutlass_bf16_128x256", GE2_DTYPE_BF16},
    {"cutlass_bf16_64x128", GE2_DTYPE_BF16}, {"cutlass_bf16_128x128", GE2_DTYPE_BF16}};

// True when this build and device offer the CUTLASS kernels; otherwise says why
// in a SKIPPED line. A CUTLASS build on a compute capability 9.0 device must offer them.
bool cutlass_offered(ge2_context_t* context) {
  const char* json = nullptr;
  REQUIRE(ge2_context_describe(context, &json) == GE2_OK);
  const auto described = nlohmann::json::parse(json);
  const std::string state = described.value("cutlass_kernels", "");
  int device = 0, major = 0, minor = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
#ifdef GE2_TEST_WITH_CUTLASS
  if (major == 9 && minor == 0) {
    CHECK_MESSAGE(state.rfind("offered", 0) == 0, "a CUTLASS build on sm_90 says: " << state);
    return state.rfind("offered", 0) == 0;
  }
#endif
  MESSAGE("SKIPPED: CUTLASS kernels " << state);
  return false;
}

}  // namespace

TEST_CASE("gpu cutlass: each configuration x dtype x activation x bias x C matches fp64") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  DeviceMemory memory;
  // Partial tiles in M and N, K below one k-block and above several, a single row.
  const std::array<std::array<std::int64_t, 3>, 5> sizes{
      {{1, 8, 8}, {37, 72, 40}, {129, 264, 136}, {300, 520, 1000}, {1024, 768, 512}}};
  int cases = 0;
  for (const CutlassKernel& kernel : kCutlassKernels)
    for (ge2_activation_t act : {GE2_ACT_NONE, GE2_ACT_RELU, GE2_ACT_GELU_ERF, GE2_ACT_GELU_TANH,
                                 GE2_ACT_SILU, GE2_ACT_QUICK_GELU})
      for (int variant = 0; variant < 4; ++variant) {
        const auto [m, n, k] = sizes[static_cast<std::size_t>(cases) % sizes.size()];
        GemmCase c;
        c.dtype = kernel.dtype;
        c.m = m;
        c.n = n;
        c.k = k;
        c.trans_b = true;
        c.act = act;
        c.has_bias = variant != 0;
        c.with_c = variant == 2;  // D = act(alpha*A*B^T + beta*C + bias)
        c.alpha = variant == 2 ? 0.75f : 1.0f;
        c.beta = variant == 2 ? -1.5f : 0.0f;
        c.pad_ldd = variant == 3 ? 8 : 0;  // D's rows padded by 16 bytes: padding stays poisoned
        c.pad_lda = variant == 3 ? 16 : 0;
        c.force_kernel = kernel.name;
        const auto r = run_gemm_case(context.get(), memory, c);
        CHECK(chosen_kernel(r.plan_json) == kernel.name);
        CHECK_MESSAGE(r.error <= 1e-2, c.label() << " " << kernel.name << " error " << r.error);
        CHECK_MESSAGE(r.padding_changed == 0, c.label() << " wrote into D's row padding");
        // The 128x128 rows run erf GELU and SiLU on instances with the activation compiled in.
        const bool compiled = std::string(kernel.name).ends_with("128x128") &&
                              (act == GE2_ACT_GELU_ERF || act == GE2_ACT_SILU);
        CHECK_MESSAGE((r.plan_json.find("activation compiled in") != std::string::npos) == compiled,
                      c.label() << " " << kernel.name);
        ++cases;
      }
  MESSAGE("CUTLASS cases run: " << cases);
}

TEST_CASE("gpu cutlass: batches run batched or fold into M; the plan says which") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  DeviceMemory memory;
  for (const CutlassKernel& kernel : kCutlassKernels)
    for (bool shared_b : {false, true}) {
      GemmCase c;
      c.dtype = kernel.dtype;
      c.batch = 3;
      c.m = 45;
      c.n = 136;
      c.k = 264;
      c.trans_b = true;
      c.shared_b = shared_b;
      c.has_bias = true;
      c.act = GE2_ACT_GELU_ERF;
      c.force_kernel = kernel.name;
      const auto r = run_gemm_case(context.get(), memory, c);
      CHECK(chosen_kernel(r.plan_json) == kernel.name);
      CHECK_MESSAGE(r.error <= 1e-2, c.label() << " " << kernel.name << " error " << r.error);
      const bool folded = r.plan_json.find("batch_folded_into_m") != std::string::npos;
      CHECK(folded == shared_b);
    }
}

TEST_CASE("gpu cutlass: untuned, the selector keeps cuBLASLt and lists CUTLASS as feasible") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  DeviceMemory memory;
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16})
    for (ge2_activation_t act :
         {GE2_ACT_GELU_ERF, GE2_ACT_SILU, GE2_ACT_GELU_TANH, GE2_ACT_QUICK_GELU}) {
      GemmCase c;
      c.dtype = dtype;
      c.m = 512;
      c.n = 1024;
      c.k = 512;
      c.trans_b = true;
      c.has_bias = true;
      c.act = act;
      const auto r = run_gemm_case(context.get(), memory, c);
      CHECK_MESSAGE(chosen_kernel(r.plan_json).rfind("lt_", 0) == 0,
                    c.label() << " chose " << chosen_kernel(r.plan_json));
      CHECK(r.plan_json.find("not chosen without a measured time") != std::string::npos);
      CHECK_MESSAGE(r.error <= 1e-2, c.label() << " error " << r.error);
    }
}

TEST_CASE("gpu cutlass: tuning times CUTLASS beside cuBLASLt, stores it, and picks the faster") {
  const std::string db = (scratch_subdir("gpu-cutlass-tune") / "tunedb.sqlite").string();
  {
    auto probe = make_context(GE2_DEVICE_CUDA);
    if (!cutlass_offered(probe.get())) return;
  }
  DeviceMemory memory;
  GemmCase c;
  c.dtype = GE2_DTYPE_BF16;
  c.m = 1024;
  c.n = 2048;
  c.k = 512;
  c.trans_b = true;
  c.has_bias = true;
  c.act = GE2_ACT_GELU_ERF;
  std::string tuned_kernel;
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_TUNE, db);
    const auto r = run_gemm_case(context.get(), memory, c);
    CHECK_MESSAGE(r.error <= 1e-2, "error " << r.error);
    const auto selection = selection_of(r.plan_json);
    tuned_kernel = selection["kernel"];
    double best = 1e30, chosen = 0;
    int measured_cutlass = 0;
    for (const auto& candidate : selection["candidates"]) {
      if (!candidate["feasible"].get<bool>()) continue;
      const std::string name = candidate["kernel"];
      CHECK_MESSAGE(candidate["measured"].get<bool>(), name << " was not measured");
      if (!candidate["measured"].get<bool>()) continue;
      const double time = candidate["score_us"];
      MESSAGE(name << ": " << time << " us");
      best = std::min(best, time);
      if (name == tuned_kernel) chosen = time;
      if (name.rfind("cutlass_", 0) == 0) ++measured_cutlass;
    }
    CHECK(measured_cutlass == 3);
    CHECK(chosen == best);
    // All three rows were timed interleaved with cuBLASLt's candidates on one rig
    // (cuda_skinny cannot take 1024 rows), not one after another.
    const char* text = nullptr;
    REQUIRE(ge2_context_describe(context.get(), &text) == GE2_OK);
    const auto tuning = nlohmann::json::parse(text)["tuning"];
    CHECK(tuning["timed_beside_cublaslt"] == 3);
    CHECK(tuning["tuned_in_this_process"] == 4);
  }
  // A later process reads the stored times and makes the same choice untuned.
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_CACHED, db);
    const auto r = run_gemm_case(context.get(), memory, c);
    CHECK(chosen_kernel(r.plan_json) == tuned_kernel);
    CHECK_MESSAGE(r.error <= 1e-2, "error " << r.error);
  }
  // A stored CUTLASS row whose configuration this build does not have is ignored.
  {
    ge2::TuneDb database(db, ge2::TuneDb::Mode::ReadWrite);
    int rewritten = 0;
    for (auto row : database.list()) {
      if (row.key.kernel.rfind("cutlass_", 0) != 0) continue;
      row.algo = {{"configuration", "a configuration of another build"}};
      row.time_us *= 0.5;  // a stored row is replaced only by a faster one
      rewritten += database.upsert(row) ? 1 : 0;
    }
    CHECK(rewritten == 3);
  }
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_CACHED, db);
    const auto r = run_gemm_case(context.get(), memory, c);
    CHECK(chosen_kernel(r.plan_json).rfind("lt_", 0) == 0);
    const char* text = nullptr;
    REQUIRE(ge2_context_describe(context.get(), &text) == GE2_OK);
    CHECK(nlohmann::json::parse(text)["tuning"]["stale_rows_ignored"] == 3);
  }
  // Tuning again replaces the stale rows, although they claim to be faster, so
  // the next process neither ignores them nor tunes again.
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_TUNE, db);
    CHECK_MESSAGE(run_gemm_case(context.get(), memory, c).error <= 1e-2, "retuned");
    ge2::TuneDb database(db, ge2::TuneDb::Mode::ReadOnly);
    for (const auto& row : database.list())
      CHECK_MESSAGE(row.algo.value("configuration", "") != "a configuration of another build",
                    row.key.to_string());
  }
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_CACHED, db);
    const auto r = run_gemm_case(context.get(), memory, c);
    const char* text = nullptr;
    REQUIRE(ge2_context_describe(context.get(), &text) == GE2_OK);
    CHECK(nlohmann::json::parse(text)["tuning"]["stale_rows_ignored"] == 0);
    CHECK_MESSAGE(r.error <= 1e-2, "error " << r.error);
  }
}

TEST_CASE("gpu cutlass: layouts the family cannot run are refused when forced, with the reason") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  struct Refused {
    std::int64_t m, n, k;
    bool trans_b;
    const char* reason;
  };
  for (const Refused& bad : {Refused{64, 64, 60, true, "K = 60 is not a multiple of 8"},
                             Refused{64, 64, 64, false, "op(B) is not K-contiguous"},
                             Refused{64, 60, 64, true, "N = 60 is not a multiple of 8"}}) {
    auto graph = make_graph();
    ge2_tensor_desc_t da{GE2_DTYPE_F16, 2, {bad.m, bad.k}, {0, 0}};
    ge2_tensor_desc_t db{GE2_DTYPE_F16, 2, {0, 0}, {0, 0}};
    db.shape[0] = bad.trans_b ? bad.n : bad.k;
    db.shape[1] = bad.trans_b ? bad.k : bad.n;
    ge2_value_t va, vb, vd;
    REQUIRE(ge2_graph_add_input(graph.get(), "a", &da, &va) == GE2_OK);
    REQUIRE(ge2_graph_add_input(graph.get(), "b", &db, &vb) == GE2_OK);
    ge2_gemm_attrs_t attrs;
    REQUIRE(ge2_gemm_attrs_init(&attrs) == GE2_OK);
    attrs.trans_b = bad.trans_b;
    REQUIRE(ge2_graph_add_gemm_bias_act(graph.get(), va, vb, GE2_NO_VALUE, &attrs, GE2_ACT_GELU_ERF,
                                        &vd) == GE2_OK);
    REQUIRE(ge2_graph_mark_output(graph.get(), vd, "d", nullptr) == GE2_OK);
    ge2_compile_options_t options;
    ge2_compile_options_init(&options);
    options.force_kernel = "cutlass_f16_64x128";
    ge2_plan_t* raw = nullptr;
    CHECK(ge2_plan_compile(context.get(), graph.get(), &options, &raw) == GE2_ERROR_UNSUPPORTED);
    CHECK(raw == nullptr);
    const std::string message = ge2_last_error();
    CHECK_MESSAGE(message.find(bad.reason) != std::string::npos, message);
    // Unforced, the same graph compiles onto another kernel.
    options.force_kernel = nullptr;
    REQUIRE(ge2_plan_compile(context.get(), graph.get(), &options, &raw) == GE2_OK);
    PlanPtr plan(raw);
  }
}

TEST_CASE(
    "gpu cutlass: the gated epilogue computes act(gate) * up in the 128x128 GEMM, matching fp64") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  DeviceMemory memory;
  // tokens x hidden x intermediate: one row, partial tiles in M and in the
  // 2I-wide N (2I = 400, 1040 are not multiples of 128), several k-blocks.
  const std::array<std::array<std::int64_t, 3>, 4> sizes{
      {{1, 64, 64}, {37, 128, 200}, {300, 264, 520}, {1024, 512, 704}}};
  int cases = 0;
  for (const auto& [kernel, dtype] : {std::pair{"cutlass_f16_128x128", GE2_DTYPE_F16},
                                      std::pair{"cutlass_bf16_128x128", GE2_DTYPE_BF16}})
    for (ge2_activation_t act : {GE2_ACT_SILU, GE2_ACT_GELU_ERF, GE2_ACT_GELU_TANH, GE2_ACT_RELU,
                                 GE2_ACT_NONE, GE2_ACT_QUICK_GELU})
      for (int variant = 0; variant < 4; ++variant) {
        const auto [t, h, n] = sizes[static_cast<std::size_t>(cases) % sizes.size()];
        const GluCase c{.dtype = dtype,
                        .act = act,
                        .tokens = t,
                        .hidden = h,
                        .intermediate = n,
                        .trans_b = true,
                        .bias = variant != 0,
                        .act_on_second = variant == 1,
                        .force_kernel = kernel,
                        // An A the TMA cannot read: the unfused steps run instead.
                        .x_offset = variant == 2 ? 3 : 0,
                        .pad_y = variant == 3 ? 8 : 0,
                        // A y the epilogue's 4-byte stores cannot take: unfused too.
                        .y_offset = variant == 1 ? 1 : 0};
        const GemmResult r = run_glu_case(context.get(), memory, c);
        CHECK_MESSAGE(r.error <= 1e-2, c.label() << " error " << r.error);
        CHECK_MESSAGE(r.padding_changed == 0, c.label() << " wrote into y's row padding");
        const auto plan = nlohmann::json::parse(r.plan_json);
        REQUIRE_MESSAGE(plan["steps"].size() == 1, c.label() << r.plan_json);
        const auto& step = plan["steps"][0];
        CHECK(step["problem"]["n"] == 2 * n);
        CHECK(step["kernel"]["name"] == kernel);
        CHECK(step["kernel"]["configuration"].get<std::string>().ends_with("gated epilogue"));
        CHECK(step["gated_epilogue"].get<std::string>().find("computed in the epilogue") !=
              std::string::npos);
        CHECK(step["kernel"]["unaligned_pointers_run"].size() == 2);
        ++cases;
      }
  MESSAGE("gated CUTLASS cases run: " << cases);
}

TEST_CASE(
    "gpu cutlass: every tile walk (swizzle x raster) computes the same GEMM; the plan names it") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  DeviceMemory memory;
  // Tile counts that the swizzle rounds up (11 x 5 tiles of 128: the padded
  // tiles must not be stored), more M tiles than N and the other way round, and
  // a batch folded into M.
  const std::array<std::array<std::int64_t, 4>, 3> sizes{
      {{1300, 520, 136, 1}, {200, 1800, 264, 1}, {300, 264, 72, 3}}};
  const std::array<std::pair<const char*, const char*>, 8> walks{
      {{"1,m", "swizzle 1, along M"},
       {"2,m", "swizzle 2, along M"},
       {"4,m", "swizzle 4, along M"},
       {"8,m", "swizzle 8, along M"},
       {"1,n", "swizzle 1, along N"},
       {"2,n", "swizzle 2, along N"},
       {"4,n", "swizzle 4, along N"},
       {"8,h", "swizzle 8, CUTLASS's heuristic order"}}};
  int cases = 0;
  for (const auto& entry : walks) {
    const auto& walk =
        entry.first;  // clang 14: no structured binding inside CHECK_MESSAGE's lambda
    const auto& described = entry.second;
    REQUIRE(setenv("GE2_CUTLASS_TILE_WALK", walk, 1) == 0);
    for (const CutlassKernel& kernel : kCutlassKernels) {
      const auto [m, n, k, batch] = sizes[static_cast<std::size_t>(cases) % sizes.size()];
      GemmCase c;
      c.dtype = kernel.dtype;
      c.m = m;
      c.n = n;
      c.k = k;
      c.batch = batch;
      c.shared_b = batch > 1;
      c.trans_b = true;
      c.act = GE2_ACT_GELU_ERF;
      c.has_bias = true;
      c.pad_ldd = 8;
      c.force_kernel = kernel.name;
      const auto r = run_gemm_case(context.get(), memory, c);
      CHECK_MESSAGE(r.error <= 1e-2, c.label() << " " << kernel.name << " walk " << walk);
      CHECK_MESSAGE(r.padding_changed == 0, c.label() << " wrote into D's row padding");
      CHECK_MESSAGE(r.plan_json.find(described) != std::string::npos, walk << ": " << r.plan_json);
      ++cases;
    }
    // The gated epilogue under the same walk.
    const GluCase g{.dtype = cases % 2 ? GE2_DTYPE_BF16 : GE2_DTYPE_F16,
                    .act = GE2_ACT_SILU,
                    .tokens = 300,
                    .hidden = 264,
                    .intermediate = 520,
                    .bias = true,
                    .force_kernel = cases % 2 ? "cutlass_bf16_128x128" : "cutlass_f16_128x128",
                    .pad_y = 8};
    const GemmResult r = run_glu_case(context.get(), memory, g);
    CHECK_MESSAGE(r.error <= 1e-2, g.label() << " walk " << walk << " error " << r.error);
    CHECK_MESSAGE(r.padding_changed == 0, g.label() << " wrote into y's row padding");
    CHECK_MESSAGE(r.plan_json.find(described) != std::string::npos, walk << ": " << r.plan_json);
    CHECK(r.plan_json.find("computed in the epilogue") != std::string::npos);
    ++cases;
  }
  REQUIRE(unsetenv("GE2_CUTLASS_TILE_WALK") == 0);
  // The default walk: swizzle 2 along N unless its rounding adds more than 5% of
  // the tiles (one tile row in M, a cluster of 2, would be rounded to 4).
  for (const auto& expected : {std::pair{std::int64_t{512}, "swizzle 2, along N"},
                               std::pair{std::int64_t{100}, "swizzle 1, CUTLASS's"}}) {
    const std::int64_t m = expected.first;  // clang 14: no structured binding in CHECK_MESSAGE
    const char* const described = expected.second;
    GemmCase c;
    c.dtype = GE2_DTYPE_F16;
    c.m = m;
    c.n = 1024;
    c.k = 64;
    c.trans_b = true;
    c.force_kernel = "cutlass_f16_128x128";
    const auto r = run_gemm_case(context.get(), memory, c);
    CHECK_MESSAGE(r.error <= 1e-2, c.label());
    CHECK_MESSAGE(r.plan_json.find(described) != std::string::npos, m << ": " << r.plan_json);
    ++cases;
  }
  MESSAGE("tile-walk cases run: " << cases);
}

TEST_CASE("gpu cutlass: untuned, gated units of 2048 rows or more run fused, matching fp64") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  DeviceMemory memory;
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16})
    for (ge2_activation_t act : {GE2_ACT_SILU, GE2_ACT_GELU_ERF})
      for (std::int64_t tokens : {2047, 2048, 2085}) {
        const GluCase c{.dtype = dtype,
                        .act = act,
                        .tokens = tokens,
                        .hidden = 256,
                        .intermediate = 712,
                        .trans_b = true,
                        .bias = false};
        const GemmResult r = run_glu_case(context.get(), memory, c);
        CHECK_MESSAGE(r.error <= 1e-2, c.label() << " error " << r.error);
        const auto plan = nlohmann::json::parse(r.plan_json);
        const std::string kernel = chosen_kernel(r.plan_json);
        const auto& steps = plan.at("steps");
        const auto gated_passes = std::count_if(steps.begin(), steps.end(), [](const auto& step) {
          return step.at("op") == "gated_mul";
        });
        if (tokens < 2048) {
          CHECK_MESSAGE(kernel.starts_with("lt_"), c.label() << ": " << kernel);
          CHECK_MESSAGE(gated_passes == 1, c.label() << ": " << steps.dump());
        } else {
          CHECK_MESSAGE(kernel.ends_with("_128x128"), c.label() << ": " << kernel);
          CHECK(steps.at(0)
                    .at("gated_epilogue")
                    .get<std::string>()
                    .find("computed in the epilogue") != std::string::npos);
          CHECK_MESSAGE(gated_passes == 0, c.label() << ": " << steps.dump());
        }
      }
}

TEST_CASE("gpu cutlass: tuning times a gated unit's epilogue itself, under a key of its own") {
  {
    auto probe = make_context(GE2_DEVICE_CUDA);
    if (!cutlass_offered(probe.get())) return;
  }
  const std::string db = (scratch_subdir("gpu-gated-tune") / "tunedb.sqlite").string();
  DeviceMemory memory;
  const GluCase c{.dtype = GE2_DTYPE_BF16,
                  .act = GE2_ACT_SILU,
                  .tokens = 1024,
                  .hidden = 512,
                  .intermediate = 704,
                  .trans_b = true,
                  .bias = true};
  std::string tuned_kernel;
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_TUNE, db);
    const GemmResult r = run_glu_case(context.get(), memory, c);
    CHECK_MESSAGE(r.error <= 1e-2, "error " << r.error);
    const auto selection = selection_of(r.plan_json);
    tuned_kernel = selection["kernel"];
    MESSAGE("tuned gated unit: " << tuned_kernel << ": " << selection["why"]);
    for (const auto& candidate : selection["candidates"]) {
      if (!candidate["feasible"].get<bool>()) continue;
      const std::string name = candidate["kernel"], reason = candidate["reason"];
      CHECK_MESSAGE(candidate["measured"].get<bool>(), name << " was not measured");
      // The gated row's time is the fused unit's; every other kernel pays the pass.
      const bool pays_pass = reason.find("separate gated_mul pass") != std::string::npos;
      CHECK_MESSAGE(pays_pass == (name != "cutlass_bf16_128x128"), name << ": " << reason);
    }
    // Timed beside cuBLASLt's candidates: the three plain rows and the gated one.
    const char* text = nullptr;
    REQUIRE(ge2_context_describe(context.get(), &text) == GE2_OK);
    CHECK(nlohmann::json::parse(text)["tuning"]["timed_beside_cublaslt"] == 4);
  }
  {
    ge2::TuneDb database(db, ge2::TuneDb::Mode::ReadOnly);
    int gated_rows = 0;
    for (const auto& row : database.list())
      if (row.key.signature.ends_with(" gated=silu")) {
        ++gated_rows;
        CHECK(row.key.kernel == "cutlass_bf16_128x128");
        CHECK(row.algo.value("configuration", "").ends_with("gated epilogue"));
      }
    CHECK(gated_rows == 1);
  }
  // A later process reads the rows and makes the same choice untuned.
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_CACHED, db);
    const GemmResult r = run_glu_case(context.get(), memory, c);
    CHECK(chosen_kernel(r.plan_json) == tuned_kernel);
    CHECK_MESSAGE(r.error <= 1e-2, "error " << r.error);
    const char* text = nullptr;
    REQUIRE(ge2_context_describe(context.get(), &text) == GE2_OK);
    CHECK(nlohmann::json::parse(text)["tuning"]["stale_rows_ignored"] == 0);
  }
}

// The gated kernel reads a copy of the weights interleaved at compile (180 MB here). Run 21
// (H100): the tuner's check of that kernel at 16x22016x4096 found zeros and left it untimed;
// the copy ran on the legacy default stream, not ordered before kernels on non-blocking
// streams (the tuner's, a caller's).
TEST_CASE(
    "gpu cutlass: a gated plan's weight copy is done before its first run on a non-blocking "
    "stream, and the tuner checks and times the gated kernel at 16 rows") {
  {
    auto probe = make_context(GE2_DEVICE_CUDA);
    if (!cutlass_offered(probe.get())) return;
  }
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    DeviceMemory memory(stream);
    GluCase c{.dtype = GE2_DTYPE_BF16,
              .act = GE2_ACT_SILU,
              .tokens = 16,
              .hidden = 4096,
              .intermediate = 11008,
              .trans_b = true,
              .force_kernel = "cutlass_bf16_128x128"};
    for (int run = 0; run < 3; ++run) {  // each compile makes a new copy
      const GemmResult r = run_glu_case(make_context(GE2_DEVICE_CUDA).get(), memory, c);
      CHECK_MESSAGE(r.error <= 1e-2, c.label() << " run " << run << " error " << r.error);
      const auto plan = nlohmann::json::parse(r.plan_json);
      REQUIRE(plan["steps"].size() == 1);
      CHECK(plan["steps"][0]["kernel"]["configuration"].get<std::string>().ends_with(
          "gated epilogue"));
    }
    const std::string db = (scratch_subdir("gpu-gated-16-rows") / "tunedb.sqlite").string();
    c.force_kernel = nullptr;
    ContextPtr tuning = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_TUNE, db);
    const GemmResult r = run_glu_case(tuning.get(), memory, c);
    CHECK_MESSAGE(r.error <= 1e-2, "tuned: error " << r.error);
    int gated_rows = 0;
    const auto selection = selection_of(r.plan_json);  // a range-for keeps no temporary alive
    for (const auto& candidate : selection["candidates"]) {
      if (candidate["kernel"] != "cutlass_bf16_128x128" || !candidate["feasible"].get<bool>())
        continue;
      ++gated_rows;
      CHECK_MESSAGE(candidate["measured"].get<bool>(), candidate["reason"]);
    }
    CHECK_MESSAGE(gated_rows == 1, "the tuned plan: " << r.plan_json);
  }
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("gpu cutlass: gated units the epilogue cannot take run unfused, and the plan says why") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  DeviceMemory memory;
  // The same forced kernel runs the GEMM, then the gated_mul pass: I not a
  // multiple of 8, output rows on odd elements.
  for (const auto& [inter, pad_y, why] :
       {std::tuple{100, 0, "I = N / 2 = 100 is not a multiple of 8"},
        std::tuple{200, 3, "rows do not start on 4-byte boundaries"}}) {
    const GluCase c{.dtype = GE2_DTYPE_BF16,
                    .act = GE2_ACT_SILU,
                    .tokens = 37,
                    .hidden = 128,
                    .intermediate = inter,
                    .trans_b = true,
                    .bias = true,
                    .force_kernel = "cutlass_bf16_128x128",
                    .pad_y = pad_y};
    const GemmResult r = run_glu_case(context.get(), memory, c);
    CHECK_MESSAGE(r.error <= 1e-2, c.label() << " error " << r.error);
    CHECK(r.padding_changed == 0);
    const auto plan = nlohmann::json::parse(r.plan_json);
    REQUIRE(plan["steps"].size() == 2);
    CHECK(plan["steps"][0]["gated_epilogue"].get<std::string>().find(why) != std::string::npos);
    CHECK(plan["steps"][1]["op"] == "gated_mul");
  }
}

TEST_CASE("gpu cutlass: pointers not 16-byte aligned run on cuBLASLt, the same plan, correct") {
  auto context = make_context(GE2_DEVICE_CUDA);
  if (!cutlass_offered(context.get())) return;
  LinearLayer layer = make_linear_layer(context.get(), GE2_DTYPE_BF16, 96, 80, 72, GE2_ACT_SILU,
                                        "cutlass_bf16_64x128");
  check_at_offsets(layer, {0, 16, 2, 8});
}
#endif  // GE2_TEST_WITH_CUDA
