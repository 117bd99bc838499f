// GPU tests of cuda_skinny, the decode-sized GEMM kernel (both forms): every
// dtype x row count x epilogue against fp64 (partial blocks of columns, K of one vector and
// of many, padded rows, C with beta), default selection on nn.Linear layers,
// folded batches, unaligned pointers and the tuning mode.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#ifdef GE2_TEST_WITH_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>

#include "support/gpu_helpers.hpp"
#include "support/scratch_dir.hpp"
#include "tunedb/tunedb.hpp"

using namespace ge2::test;

namespace {

// A forced cuda_skinny case: variant 0 without bias, 1 with bias and a last block of
// 5 of its 16 columns, 2 with C (alpha, beta), 3 with padded rows (D's padding stays
// poisoned: D needs no alignment). K: one vector, a partial 32-element step, or more
// steps than one round of the tensor-core form's warps takes (8 warps x 4 steps of 32).
GemmCase skinny_case(ge2_dtype_t dtype, std::int64_t m, ge2_activation_t act, int variant,
                     int k_choice) {
  GemmCase c;
  c.dtype = dtype;
  c.m = m;
  c.n = variant % 2 ? 1061 : 1064;
  c.k = k_choice % 3 == 0 ? 8 : (k_choice % 3 == 1 ? 1000 : 4104);
  c.trans_b = true;
  c.act = act;
  c.has_bias = variant != 0;
  c.with_c = variant == 2;
  c.alpha = variant == 2 ? 0.75f : 1.0f;
  c.beta = variant == 2 ? -1.5f : 0.0f;
  c.pad_ldd = variant == 3 ? 3 : 0;
  c.pad_lda = variant == 3 ? 16 : 0;
  c.pad_ldb = variant == 3 ? 8 : 0;
  c.force_kernel = "cuda_skinny";
  return c;
}

}  // namespace

TEST_CASE("gpu skinny: each dtype x rows x activation x bias x C matches fp64") {
  auto context = make_context(GE2_DEVICE_CUDA);
  DeviceMemory memory;
  int cases = 0;
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16, GE2_DTYPE_F32})
    for (std::int64_t m : {1, 2, 3, 5, 8})
      for (ge2_activation_t act : {GE2_ACT_NONE, GE2_ACT_RELU, GE2_ACT_GELU_ERF, GE2_ACT_GELU_TANH,
                                   GE2_ACT_SILU, GE2_ACT_QUICK_GELU})
        for (int variant = 0; variant < 4; ++variant) {
          const GemmCase c = skinny_case(dtype, m, act, variant, cases);
          const auto r = run_gemm_case(context.get(), memory, c);
          CHECK(chosen_kernel(r.plan_json) == "cuda_skinny");
          CHECK_MESSAGE(r.error <= gpu_tolerance(dtype, "cuda_skinny"),
                        c.label() << " error " << r.error);
          CHECK_MESSAGE(r.padding_changed == 0, c.label() << " wrote into D's row padding");
          ++cases;
        }
  MESSAGE("cuda_skinny cases run: " << cases);
}

TEST_CASE("gpu skinny: the tensor-core form (16-bit data, 2-16 rows) matches fp64") {
  auto context = make_context(GE2_DEVICE_CUDA);
  DeviceMemory memory;
  int cases = 0;
  // 9-16 rows: the upper half of each m16n8k16 tile in use.
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16})
    for (std::int64_t m : {1, 2, 3, 7, 8, 9, 12, 16})
      for (ge2_activation_t act : {GE2_ACT_NONE, GE2_ACT_GELU_ERF, GE2_ACT_SILU})
        for (int variant = 0; variant < 4; ++variant) {
          const GemmCase c = skinny_case(dtype, m, act, variant, cases);
          const auto r = run_gemm_case(context.get(), memory, c);
          CHECK(chosen_kernel(r.plan_json) == "cuda_skinny");
          // One row stays on CUDA cores.
          CHECK((r.plan_json.find("tensor cores") != std::string::npos) == (m >= 2));
          if (m >= 2) CHECK(r.plan_json.find("over 16 columns per block") != std::string::npos);
          CHECK_MESSAGE(r.error <= gpu_tolerance(dtype, "cuda_skinny"),
                        c.label() << " error " << r.error);
          CHECK_MESSAGE(r.padding_changed == 0, c.label() << " wrote into D's row padding");
          ++cases;
        }
  MESSAGE("tensor-core cuda_skinny cases run: " << cases);
}

TEST_CASE("gpu skinny: K split over blocks matches fp64, on every execution of a plan") {
  int device = 0, sms = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess);
  auto context = make_context(GE2_DEVICE_CUDA);
  DeviceMemory memory;
  auto split = [](const GemmResult& r) {
    return r.plan_json.find("K split over") != std::string::npos;
  };
  // The split needs a grid of 1-2 waves of resident blocks (skinny_k_splits), which
  // depends on the kernel's occupancy: N for 1.2 waves at 1, 2, ... blocks per SM
  // until one splits; its last 16-column tile is partial. K = 8200: 257 steps of 32,
  // so the two splits take 129 and 128.
  GemmCase c;
  c.dtype = GE2_DTYPE_F16;
  c.m = 2;
  c.k = 8200;
  c.trans_b = true;
  c.force_kernel = "cuda_skinny";
  bool found = false;
  for (int per_sm = 1; per_sm <= 8 && !found; ++per_sm) {
    c.n = 16 * (std::int64_t{sms} * per_sm * 6 / 5) - 5;
    const auto r = run_gemm_case(context.get(), memory, c);
    CHECK_MESSAGE(r.error <= gpu_tolerance(c.dtype, "cuda_skinny"), c.label() << " " << r.error);
    found = split(r);
  }
  REQUIRE_MESSAGE(found, "no N up to 8 blocks per SM made cuda_skinny split K");
  MESSAGE("K split at N = " << c.n);
  int cases = 0;
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16})
    for (std::int64_t m : {3, 5, 8}) {
      GemmCase v = c;
      v.dtype = dtype;
      v.m = m;
      v.act = cases % 2 ? GE2_ACT_SILU : GE2_ACT_GELU_ERF;
      v.has_bias = cases % 3 != 2;
      v.with_c = cases % 3 == 1;
      v.alpha = v.with_c ? 0.75f : 1.0f;
      v.beta = v.with_c ? -1.5f : 0.0f;
      v.pad_ldd = cases % 3 == 2 ? 3 : 0;
      const auto r = run_gemm_case(context.get(), memory, v);
      CHECK(split(r));
      CHECK_MESSAGE(r.error <= gpu_tolerance(dtype, "cuda_skinny"), v.label() << " " << r.error);
      CHECK_MESSAGE(r.padding_changed == 0, v.label() << " wrote into D's row padding");
      ++cases;
    }
  // One plan executed again and again: the tile counters start from zero each time,
  // also after an unaligned execution on cuBLASLt, which shares the stream's workspace.
  LinearLayer layer = make_linear_layer(context.get(), GE2_DTYPE_BF16, 4, c.n, c.k,
                                        GE2_ACT_GELU_ERF, "cuda_skinny");
  check_at_offsets(layer, {0, 16, 2, 0, 8});
}

TEST_CASE("gpu skinny: chosen untuned for decode-sized nn.Linear layers; batches fold into M") {
  auto context = make_context(GE2_DEVICE_CUDA);
  DeviceMemory memory;
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16}) {
    GemmCase c;
    c.dtype = dtype;
    c.m = 1;
    c.n = 4096;
    c.k = 4096;
    c.trans_b = true;
    c.has_bias = true;
    c.act = GE2_ACT_GELU_ERF;
    auto r = run_gemm_case(context.get(), memory, c);
    CHECK(chosen_kernel(r.plan_json) == "cuda_skinny");
    CHECK_MESSAGE(r.error <= 1e-2, c.label() << " error " << r.error);
    const auto plan = nlohmann::json::parse(r.plan_json);  // a range-for keeps no temporary alive
    for (const auto& step : plan["steps"])
      if (step.contains("selection")) CHECK(step["kernel"]["separate_activation_kernel"] == false);
    // Three batches of two rows over one weight: six rows, one launch (forced:
    // untuned, more than one row goes to cuBLASLt).
    c.force_kernel = "cuda_skinny";
    c.m = 2;
    c.batch = 3;
    c.shared_b = true;
    r = run_gemm_case(context.get(), memory, c);
    CHECK(chosen_kernel(r.plan_json) == "cuda_skinny");
    CHECK(r.plan_json.find("batch_folded_into_m") != std::string::npos);
    CHECK_MESSAGE(r.error <= 1e-2, c.label() << " error " << r.error);
    // Own weights per batch: a batched launch.
    c.shared_b = false;
    c.n = 1056;  // 66 blocks of 16 columns, half the SMs
    r = run_gemm_case(context.get(), memory, c);
    CHECK(chosen_kernel(r.plan_json) == "cuda_skinny");
    CHECK(r.plan_json.find("batch_folded_into_m") == std::string::npos);
    CHECK_MESSAGE(r.error <= 1e-2, c.label() << " error " << r.error);
    // Untuned from two rows on a 32 MB weight, and at 17 (more than it takes): cuBLASLt.
    c.force_kernel = nullptr;
    c.batch = 1;
    c.shared_b = true;
    c.n = 4096;
    for (std::int64_t m : {2, 16, 17}) {
      c.m = m;
      r = run_gemm_case(context.get(), memory, c);
      CHECK(chosen_kernel(r.plan_json).rfind("lt_", 0) == 0);
    }
    // On an 8 MB weight its tensor-core form at 2-8 rows with erf GELU, which cuBLASLt
    // runs as a separate pass; cuBLASLt with tanh GELU, which its epilogue computes.
    c.n = 2048;
    c.k = 2048;
    for (std::int64_t m : {2, 5, 8}) {
      c.m = m;
      c.act = GE2_ACT_GELU_ERF;
      r = run_gemm_case(context.get(), memory, c);
      CHECK(chosen_kernel(r.plan_json) == "cuda_skinny");
      CHECK(r.plan_json.find("tensor cores") != std::string::npos);
      CHECK_MESSAGE(r.error <= 1e-2, c.label() << " error " << r.error);
      c.act = GE2_ACT_GELU_TANH;
      r = run_gemm_case(context.get(), memory, c);
      CHECK(chosen_kernel(r.plan_json).rfind("lt_", 0) == 0);
    }
  }
}

TEST_CASE("gpu skinny: pointers not 16-byte aligned run on cuBLASLt, the same plan, correct") {
  auto context = make_context(GE2_DEVICE_CUDA);
  LinearLayer layer =
      make_linear_layer(context.get(), GE2_DTYPE_F16, 3, 1104, 72, GE2_ACT_SILU, "cuda_skinny");
  check_at_offsets(layer, {0, 16, 2, 8});
}

TEST_CASE("gpu skinny: the tuning mode times it beside cuBLASLt and stores its row") {
  const std::string db = (scratch_subdir("gpu-skinny-tune") / "tunedb.sqlite").string();
  DeviceMemory memory;
  GemmCase c;
  c.dtype = GE2_DTYPE_BF16;
  c.m = 4;
  c.n = 11008;
  c.k = 4096;
  c.trans_b = true;
  c.has_bias = true;
  c.act = GE2_ACT_SILU;
  {
    ContextPtr context = make_tuning_context(GE2_DEVICE_CUDA, GE2_TUNE_TUNE, db);
    const auto r = run_gemm_case(context.get(), memory, c);
    CHECK_MESSAGE(r.error <= 1e-2, "error " << r.error);
    bool measured = false;
    const auto selection = selection_of(r.plan_json);  // a named object: the loop reads into it
    for (const auto& candidate : selection["candidates"]) {
      if (candidate["kernel"] != "cuda_skinny") continue;
      measured = candidate["measured"].get<bool>();
      MESSAGE("cuda_skinny: " << candidate["score_us"] << " us; chosen "
                              << chosen_kernel(r.plan_json));
    }
    CHECK(measured);
  }
  ge2::TuneDb database(db, ge2::TuneDb::Mode::ReadOnly);
  int rows = 0;
  for (const auto& row : database.list())
    if (row.key.kernel == "cuda_skinny") {
      ++rows;
      CHECK(row.algo.value("configuration", "").find("columns per block") != std::string::npos);
    }
  CHECK(rows == 1);
}
#endif  // GE2_TEST_WITH_CUDA
