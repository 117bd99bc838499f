// Selector rules with synthetic devices: every branch without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "select/selector.hpp"

using namespace ge2;

namespace {

GemmProblem problem(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmProblem p;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = {1, m, k, 0, k, 1};
  p.b = {1, k, n, 0, n, 1};
  p.d = {1, m, n, 0, n, 1};
  return p;
}

const Candidate& candidate(const Selection& s, KernelId id) {
  for (const auto& c : s.candidates)
    if (c.kernel == id) return c;
  FAIL("no candidate");
  return s.candidates.front();
}

}  // namespace

TEST_CASE("selector: the CPU backend always selects cpu_ref") {
  const auto s = select_gemm_kernel(problem(DType::F16, 512, 512, 512), DeviceInfo{}, {});
  CHECK(s.kernel == KernelId::CpuRef);
  CHECK_FALSE(candidate(s, KernelId::LtF16).feasible);
  CHECK(candidate(s, KernelId::LtF16).reason == "no CUDA device in this context");
}

TEST_CASE("selector: large aligned f16 selects lt_f16 on an H200") {
  const auto s = select_gemm_kernel(problem(DType::F16, 4096, 4096, 4096), synthetic_h200(), {});
  CHECK(s.kernel == KernelId::LtF16);
  CHECK_FALSE(candidate(s, KernelId::CpuRef).feasible);
  CHECK_FALSE(candidate(s, KernelId::LtBf16).feasible);
  CHECK(candidate(s, KernelId::CudaF32).feasible);
}

TEST_CASE("selector: dtype rules, TF32 policy and compute capability") {
  const DeviceInfo h200 = synthetic_h200();
  auto s = select_gemm_kernel(problem(DType::F32, 2048, 2048, 2048), h200, {});
  CHECK(s.kernel == KernelId::LtF32);
  CHECK(candidate(s, KernelId::LtTf32).reason.find("allow_tf32") != std::string::npos);
  SelectionPolicy tf32;
  tf32.allow_tf32 = true;
  s = select_gemm_kernel(problem(DType::F32, 2048, 2048, 2048), h200, tf32);
  CHECK(s.kernel == KernelId::LtTf32);
  DeviceInfo volta = h200;
  volta.cc_major = 7;
  s = select_gemm_kernel(problem(DType::BF16, 2048, 2048, 2048), volta, {});
  CHECK(s.kernel == KernelId::CudaF32);
  CHECK(candidate(s, KernelId::LtBf16).reason.find("8.0") != std::string::npos);
}

TEST_CASE("selector: layouts cuBLASLt cannot express go to the fallback") {
  GemmProblem p = problem(DType::F16, 256, 256, 256);
  p.a.col_stride = 2;  // neither dimension unit-stride
  p.a.row_stride = 600;
  const auto s = select_gemm_kernel(p, synthetic_h200(), {});
  CHECK(s.kernel == KernelId::CudaF32);
  CHECK(candidate(s, KernelId::LtF16).reason == "A has no unit-stride dimension");
  CHECK(cublaslt_layout_problem(problem(DType::F16, 8, 8, 8)).empty());
}

TEST_CASE("selector: unaligned leading dimensions are detected") {
  CHECK(is_tensor_core_aligned(problem(DType::F16, 64, 64, 64)));
  CHECK_FALSE(is_tensor_core_aligned(problem(DType::F16, 63, 65, 67)));
  CHECK(is_tensor_core_aligned(problem(DType::F32, 64, 4, 4)));
}

TEST_CASE("selector: a layout's alignment is the largest power of two dividing every stride") {
  CHECK(layout_alignment_bytes(problem(DType::F16, 64, 64, 64)) == 16);
  // bf16 rows of 22 elements (44 bytes) and of 23 (46): the two must not share an algorithm.
  GemmProblem p = problem(DType::BF16, 27, 6, 22);
  p.a.row_stride = 22;
  p.b = {1, 6, 22, 0, 22, 1};
  p.d.row_stride = 8;
  CHECK(layout_alignment_bytes(p) == 4);
  p.b.row_stride = 23;
  CHECK(layout_alignment_bytes(p) == 2);
  GemmProblem f32 = problem(DType::F32, 8, 6, 8);  // D rows of 24 bytes
  CHECK(layout_alignment_bytes(f32) == 8);
  f32.has_c = true;
  f32.c = {1, 8, 6, 0, 7, 1};  // C rows of 28 bytes
  CHECK(layout_alignment_bytes(f32) == 4);
  f32.batch = 2;
  f32.d.batch_stride = 50;  // 200 bytes: no narrower than C's rows
  CHECK(layout_alignment_bytes(f32) == 4);
  f32.a.batch_stride = 65;  // 260 bytes
  CHECK(layout_alignment_bytes(f32) == 4);
  f32.a.batch_stride = 1;  // one element: the dtype's size
  CHECK(layout_alignment_bytes(f32) == 4);
}

TEST_CASE("selector: measured times outrank the model, and forcing is checked") {
  const GemmProblem p = problem(DType::F16, 4096, 4096, 4096);
  MeasuredTime measured = [](KernelId id, const GemmProblem&) -> std::optional<double> {
    if (id == KernelId::CudaF32) return 10.0;
    if (id == KernelId::LtF16) return 20.0;
    return std::nullopt;
  };
  auto s = select_gemm_kernel(p, synthetic_h200(), {}, measured);
  CHECK(s.kernel == KernelId::CudaF32);
  CHECK(candidate(s, KernelId::CudaF32).measured);
  SelectionPolicy forced;
  forced.forced = KernelId::CudaF32;
  s = select_gemm_kernel(p, synthetic_h200(), forced);
  CHECK(s.kernel == KernelId::CudaF32);
  forced.forced = KernelId::LtBf16;
  CHECK_THROWS_WITH_AS(select_gemm_kernel(p, synthetic_h200(), forced),
                       doctest::Contains("needs bf16"), Error);
}

TEST_CASE("selector: activations without a cuBLASLt epilogue cost an extra pass in the estimate") {
  GemmProblem p = problem(DType::F16, 4096, 4096, 4096);
  const double plain =
      candidate(select_gemm_kernel(p, synthetic_h200(), {}), KernelId::LtF16).estimated_us;
  for (Activation act : {Activation::GeluErf, Activation::Silu}) {
    p.act = act;
    const auto s = select_gemm_kernel(p, synthetic_h200(), {});
    CHECK(candidate(s, KernelId::LtF16).estimated_us > plain);
    CHECK(candidate(s, KernelId::LtF16)
              .reason.find(std::string("separate ") + activation_name(act) + " pass") !=
          std::string::npos);
  }
  for (Activation act : {Activation::Relu, Activation::GeluTanh}) {  // fused by cuBLASLt
    p.act = act;
    const auto s = select_gemm_kernel(p, synthetic_h200(), {});
    CHECK(candidate(s, KernelId::LtF16).reason.find("separate") == std::string::npos);
  }
}

namespace {

// nn.Linear's layout: x [M, K] times the weight [N, K] transposed.
GemmProblem linear(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmProblem p = problem(dtype, m, n, k);
  p.trans_b = true;
  p.b = {1, n, k, 0, k, 1};
  return p;
}

}  // namespace

TEST_CASE("selector: cuda_skinny takes one-row GEMMs on nn.Linear weights, and says why not") {
  const DeviceInfo h200 = synthetic_h200();
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    const KernelId lt = cublaslt_kernel_for(dtype);
    // Run 11 (H200): one row, skinny vs cuBLASLt: 4096x4096 10.0 vs 10.9 us; erf at
    // 11008x4096 27.4 vs 28.8 with the separate pass; two rows 13.4 vs 11.3.
    for (const auto& shape :
         {std::pair<std::int64_t, std::int64_t>{4096, 4096}, {11008, 4096}, {4096, 11008}})
      for (Activation act : {Activation::GeluErf, Activation::Silu}) {
        GemmProblem p = linear(dtype, 1, shape.first, shape.second);
        p.act = act;
        CAPTURE(p.n);
        CHECK(select_gemm_kernel(p, h200, {}).kernel == KernelId::CudaSkinny);
      }
    const auto refused = [&](const GemmProblem& p) {
      const auto s = select_gemm_kernel(p, h200, {});
      CHECK(s.kernel != KernelId::CudaSkinny);
      return candidate(s, KernelId::CudaSkinny).reason;
    };
    CHECK(refused(linear(dtype, 17, 11008, 4096)).find("M = 17 is more rows than it takes (16)") !=
          std::string::npos);
    // Over 8 rows only the tensor-core form (16-bit data, compute capability 8.0+).
    if (dtype == DType::F32)
      CHECK(refused(linear(dtype, 9, 11008, 4096)).find("its CUDA-core form takes (8)") !=
            std::string::npos);
    else
      CHECK(candidate(select_gemm_kernel(linear(dtype, 9, 11008, 4096), h200, {}),
                      KernelId::CudaSkinny)
                .feasible);
    // Its blocks hold 16 columns at any row count: 1056 columns give the 132 SMs half a
    // block each.
    if (dtype != DType::F32) {
      CHECK(candidate(select_gemm_kernel(linear(dtype, 9, 1056, 4096), h200, {}),
                      KernelId::CudaSkinny)
                .feasible);
      CHECK(refused(linear(dtype, 16, 1040, 4096)).find("65 blocks of 16 columns") !=
            std::string::npos);
    }
    CHECK(refused(problem(dtype, 1, 11008, 4096)).find("not K-contiguous") != std::string::npos);
    CHECK(refused(linear(dtype, 1, 11008, 4095)).find("K = 4095 is not a multiple") !=
          std::string::npos);
    CHECK(refused(linear(dtype, 1, 4096, std::int64_t{1} << 31)).find("K 2^30") !=
          std::string::npos);
    CHECK(refused(linear(dtype, 1, 512, 4096)).find("fewer than half the 132 SMs") !=
          std::string::npos);
    // A batch over one weight folds into M while the rows fit.
    GemmProblem batched = linear(dtype, 2, 4096, 4096);
    batched.batch = 4;
    batched.a = {4, 2, 4096, 2 * 4096, 4096, 1};
    batched.d = {4, 2, 4096, 2 * 4096, 4096, 1};
    CHECK(skinny_problem(batched).m == 8);
    CHECK(candidate(select_gemm_kernel(batched, h200, {}), KernelId::CudaSkinny).feasible);
    batched.batch = 9;
    batched.a.batch = batched.d.batch = 9;
    CHECK(skinny_problem(batched).m == 2);  // 18 rows would not fit: batched launch
    if (dtype == DType::F32) continue;      // lt_f32 (no TF32) is slower than both rules below
    // Run 23 (H100): from two rows its tensor-core form runs erf-GELU layers within
    // -3% to +20% of cuBLASLt and its separate pass: not chosen untuned.
    for (std::int64_t m : {2, 8, 16}) {
      GemmProblem p = linear(dtype, m, 11008, 4096);
      p.act = Activation::GeluErf;
      const auto s = select_gemm_kernel(p, h200, {});
      CHECK(s.kernel != KernelId::CudaSkinny);
      CHECK(candidate(s, KernelId::CudaSkinny).feasible);  // forced or tuned only
      CHECK(candidate(s, KernelId::CudaSkinny).reason.find("more than 1 row(s)") !=
            std::string::npos);
      // Measured faster, it is chosen.
      const MeasuredTime measured = [&](KernelId id, const GemmProblem&) -> std::optional<double> {
        return id == KernelId::CudaSkinny ? 10.0 : 20.0;
      };
      CHECK(select_gemm_kernel(p, h200, {}, measured).kernel == KernelId::CudaSkinny);
    }
    // Run 11: at 2x4096x14336 with erf GELU the cost model alone chose it, 28% slower.
    GemmProblem two_rows = linear(dtype, 2, 4096, 14336);
    two_rows.act = Activation::GeluErf;
    CHECK(select_gemm_kernel(two_rows, h200, {}).kernel == lt);
    // Large weights: one row on cuda_skinny, two on cuBLASLt, also on a part with
    // 2.5x the bandwidth (the rule must not flip with the bandwidth figure).
    for (double bandwidth : {3300.0, 4200.0, 8000.0}) {
      DeviceInfo device = h200;
      device.memory_bandwidth_gbs = bandwidth;
      CAPTURE(bandwidth);
      CHECK(select_gemm_kernel(linear(dtype, 1, 8192, 28672), device, {}).kernel ==
            KernelId::CudaSkinny);
      CHECK(select_gemm_kernel(linear(dtype, 2, 8192, 28672), device, {}).kernel == lt);
    }
  }
}

TEST_CASE(
    "selector: untuned, 2-8 rows on a small weight with an activation cuBLASLt lacks run on "
    "cuda_skinny") {
  const DeviceInfo h200 = synthetic_h200();
  constexpr std::int64_t kBound = std::int64_t{10} << 20;  // B elements (20 MB of 16-bit data)
  for (DType dtype : {DType::F16, DType::BF16}) {
    const KernelId lt = cublaslt_kernel_for(dtype);
    for (Activation act : {Activation::GeluErf, Activation::Silu, Activation::QuickGelu,
                           Activation::None, Activation::Relu, Activation::GeluTanh})
      for (std::int64_t m : {1, 2, 5, 8, 9, 16})
        // Run 23 measured 4096 x 2048 to 6144 x 1536 and 11008 x 4096; 2560 x 4096 sits at
        // the bound, 2568 x 4096 above it, 3072 x 4096 lost at 8 rows (0.88x).
        for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{4096, 2048},
                                  {6144, 1536},
                                  {2560, 4096},
                                  {2568, 4096},
                                  {4096, 4096},
                                  {11008, 4096}}) {
          // Named copies, not structured bindings: CAPTURE's lambda cannot capture those
          // before clang 16.
          const std::int64_t n = shape.first, k = shape.second;
          GemmProblem p = linear(dtype, m, n, k);
          p.has_bias = true;
          p.act = act;
          CAPTURE(activation_name(act));
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          const auto s = select_gemm_kernel(p, h200, {});
          const bool pass_act = activation_info(act).cublaslt == LtEpilogue::kNone;
          if (m == 1) {
            CHECK(s.kernel == KernelId::CudaSkinny);  // the one-row rule
          } else if (pass_act && m <= 8 && n * k <= kBound) {
            CHECK(s.kernel == KernelId::CudaSkinny);
            CHECK(s.why.find("2 to 8 rows with") != std::string::npos);
            CHECK(s.why.find("B of at most 10485760 elements") != std::string::npos);
            CHECK(candidate(s, KernelId::CudaSkinny).reason.find("preferred untuned") !=
                  std::string::npos);
          } else {
            CHECK(s.kernel == lt);
          }
        }
    // A folded batch counts its rows: 2 x 4 rows over one weight fold to 8 (preferred),
    // 3 x 3 to 9 (not).
    GemmProblem batched = linear(dtype, 4, 4096, 2048);
    batched.act = Activation::GeluErf;
    batched.batch = 2;
    batched.a = {2, 4, 2048, 4 * 2048, 2048, 1};
    batched.d = {2, 4, 4096, 4 * 4096, 4096, 1};
    CHECK(select_gemm_kernel(batched, h200, {}).kernel == KernelId::CudaSkinny);
    batched.m = 3;
    batched.batch = 3;
    batched.a = {3, 3, 2048, 3 * 2048, 2048, 1};
    batched.d = {3, 3, 4096, 3 * 4096, 4096, 1};
    CHECK(select_gemm_kernel(batched, h200, {}).kernel == lt);
    // Measured times outrank the rule.
    GemmProblem p = linear(dtype, 8, 4096, 2048);
    p.act = Activation::GeluErf;
    const MeasuredTime measured = [&](KernelId id, const GemmProblem&) -> std::optional<double> {
      return id == KernelId::CudaSkinny ? 12.0 : 9.0;
    };
    CHECK(select_gemm_kernel(p, h200, {}, measured).kernel == lt);
    // A gated unit's GEMM (its activation in the gated_mul pass) is not taken.
    GemmProblem gated = linear(dtype, 8, 4096, 2048);
    gated.gated = GatedOutput{Activation::Silu, {1, 8, 2048, 0, 2048, 1}};
    CHECK(select_gemm_kernel(gated, h200, {}).kernel == lt);
    // No tensor-core form before compute capability 8.0: the CUDA-core form is not preferred.
    if (dtype == DType::F16) {
      DeviceInfo turing = h200;
      turing.cc_major = 7;
      turing.cc_minor = 5;
      CHECK(select_gemm_kernel(p, turing, {}).kernel == lt);
    }
  }
  // 32-bit data runs on CUDA cores: not preferred from two rows.
  GemmProblem p = linear(DType::F32, 8, 4096, 2048);
  p.act = Activation::GeluErf;
  CHECK(select_gemm_kernel(p, h200, {}).kernel != KernelId::CudaSkinny);
}

TEST_CASE("selector: CUTLASS kernels are scored but chosen only on a measured time or forced") {
  const DeviceInfo h200 = synthetic_h200();
  for (DType dtype : {DType::F16, DType::BF16}) {
    const KernelId lt = dtype == DType::F16 ? KernelId::LtF16 : KernelId::LtBf16;
    const KernelId coop =
        dtype == DType::F16 ? KernelId::CutlassF16Coop : KernelId::CutlassBf16Coop;
    const KernelId pingpong128 =
        dtype == DType::F16 ? KernelId::CutlassF16Pingpong128 : KernelId::CutlassBf16Pingpong128;
    for (Activation act : {Activation::None, Activation::GeluTanh, Activation::GeluErf,
                           Activation::Silu, Activation::QuickGelu}) {
      for (GemmProblem p : {linear(dtype, 4096, 11008, 4096), linear(dtype, 2048, 11008, 4096),
                            linear(dtype, 2047, 11008, 4096), linear(dtype, 8, 4096, 4096),
                            linear(dtype, 16384, 4096, 1024), linear(dtype, 4096, 4096, 4104),
                            linear(dtype, 4096, 4096, 11008)}) {
        p.has_bias = true;
        p.act = act;
        CAPTURE(activation_name(act));
        CAPTURE(p.m);
        const auto s = select_gemm_kernel(p, h200, {});
        // From 2048 rows and up to K = 4096 an activation cuBLASLt's epilogue lacks runs
        // fused on the 128x128 rows untuned (measured: KernelInfo::pass_act_*_untuned);
        // deeper K (4104, 11008) stays on cuBLASLt and its pass.
        const bool pass_act =
            act == Activation::GeluErf || act == Activation::Silu || act == Activation::QuickGelu;
        if (pass_act && p.m >= 2048 && p.k <= 4096) {
          CHECK(s.kernel == pingpong128);
          CHECK(s.why.find("2048 or more rows with") != std::string::npos);
          CHECK(s.why.find("and K of at most 4096") != std::string::npos);
          CHECK(candidate(s, pingpong128).reason.find("preferred untuned") != std::string::npos);
        } else {
          CHECK(s.kernel == lt);
        }
        const Candidate& c = candidate(s, coop);
        CHECK(c.feasible);
        CHECK(c.estimated_us > 0);
        CHECK(c.reason.find("not chosen without a measured time") != std::string::npos);
      }
    }
    // A measured time makes it a contender like any other kernel.
    GemmProblem p = linear(dtype, 4096, 11008, 4096);
    p.act = Activation::GeluErf;
    const MeasuredTime measured = [&](KernelId id, const GemmProblem&) -> std::optional<double> {
      if (id == coop) return 600.0;
      if (id == lt) return 650.0;
      return std::nullopt;
    };
    CHECK(select_gemm_kernel(p, h200, {}, measured).kernel == coop);
    SelectionPolicy forced;
    forced.forced = coop;
    CHECK(select_gemm_kernel(p, h200, forced).kernel == coop);
  }
  // The model still ranks the configurations among themselves: at small M the
  // 64x128 ping-pong tiles fill more SMs than 128x256 ones.
  GemmProblem small = linear(DType::F16, 64, 4096, 4096);
  small.act = Activation::GeluErf;
  const auto s = select_gemm_kernel(small, h200, {});
  CHECK(candidate(s, KernelId::CutlassF16Pingpong).estimated_us <
        candidate(s, KernelId::CutlassF16Coop).estimated_us);
}

TEST_CASE("selector: a gated unit's pass is charged to kernels without a gated epilogue") {
  const DeviceInfo h200 = synthetic_h200();
  GemmProblem p = linear(DType::BF16, 4096, 2 * 11008, 4096);
  const GemmProblem plain = p;
  p.gated = GatedOutput{Activation::Silu, {1, 4096, 11008, 0, 11008, 1}};
  CHECK(gated_epilogue_problem(p, KernelId::CutlassBf16Pingpong128).empty());
  // The tuner's times are of the GEMM alone, for both kinds of kernel.
  const MeasuredTime measured = [](KernelId id, const GemmProblem& q) -> std::optional<double> {
    if (id == KernelId::LtBf16) return 1000.0;
    if (id == KernelId::CutlassBf16Pingpong128) return 1040.0;
    if (id == KernelId::CutlassBf16Coop) return 1020.0;
    (void)q;
    return std::nullopt;
  };
  const auto s = select_gemm_kernel(p, h200, {}, measured);
  const Candidate& lt = candidate(s, KernelId::LtBf16);
  CHECK(lt.estimated_us > 1000.0 + 50.0);  // 2I x M read, I x M written: ~270 MB
  CHECK(lt.reason.find("+ separate gated_mul pass") != std::string::npos);
  // The 128x128 rows compute it in the epilogue; the 128x256 row has no gated instance.
  CHECK(candidate(s, KernelId::CutlassBf16Pingpong128).estimated_us == 1040.0);
  CHECK(candidate(s, KernelId::CutlassBf16Coop).estimated_us > 1020.0 + 50.0);
  CHECK(s.kernel == KernelId::CutlassBf16Pingpong128);
  // Without the gated output the same times choose cuBLASLt.
  CHECK(select_gemm_kernel(plain, h200, {}, measured).kernel == KernelId::LtBf16);
  // What the epilogue cannot take: then every kernel pays the pass.
  GemmProblem with_c = p;
  with_c.has_c = true;
  with_c.c = with_c.d;
  with_c.beta = 1.0f;
  CHECK(gated_epilogue_problem(with_c, KernelId::CutlassBf16Pingpong128) ==
        "the gated epilogue takes no C");
  const auto unfusable = select_gemm_kernel(with_c, h200, {}, measured);
  CHECK(candidate(unfusable, KernelId::CutlassBf16Pingpong128).estimated_us > 1040.0 + 50.0);
  GemmProblem kn = p;
  kn.trans_b = false;
  CHECK(gated_epilogue_problem(kn, KernelId::CutlassBf16Pingpong128) ==
        "B is not in [N, K] layout (trans_b)");
  GemmProblem strided = p;
  strided.gated->out.col_stride = 2;
  CHECK(gated_epilogue_problem(strided, KernelId::CutlassBf16Pingpong128) ==
        "the gated output is not row-major");
  CHECK(gated_epilogue_problem(plain, KernelId::CutlassBf16Pingpong128) == "not a gated unit");
  // cpu_ref takes any layout; the CUTLASS rows want I a multiple of 8, the 128x256 row has none.
  CHECK(gated_epilogue_problem(kn, KernelId::CpuRef).empty());
  GemmProblem odd_i = p;
  odd_i.n = 200;
  CHECK(gated_epilogue_problem(odd_i, KernelId::CutlassBf16Pingpong128) ==
        "I = N / 2 = 100 is not a multiple of 8");
  CHECK(gated_epilogue_problem(p, KernelId::CutlassBf16Coop) ==
        "kernel 'cutlass_bf16_128x256' has no gated epilogue");
  // The CPU reference has the gated epilogue too.
  CHECK(candidate(select_gemm_kernel(p, DeviceInfo{}, {}), KernelId::CpuRef)
            .reason.find("gated_mul") == std::string::npos);
}

TEST_CASE("selector: untuned, a gated unit of 2048 rows or more runs fused on CUTLASS") {
  const DeviceInfo h200 = synthetic_h200();
  const auto gated_unit = [](DType dtype, std::int64_t rows, std::int64_t inter) {
    GemmProblem p = linear(dtype, rows, 2 * inter, 4096);
    p.gated = GatedOutput{Activation::Silu, {1, rows, inter, 0, inter, 1}};
    return p;
  };
  for (const auto& row : {std::pair{DType::BF16, KernelId::CutlassBf16Pingpong128},
                          std::pair{DType::F16, KernelId::CutlassF16Pingpong128}}) {
    // Plain variables: lambdas (CAPTURE, MeasuredTime) cannot capture structured bindings
    // before clang 16.
    const DType dtype = row.first;
    const KernelId cutlass = row.second;
    CAPTURE(dtype_name(dtype));
    for (const std::int64_t rows : {2048, 3000, 8192}) {
      const auto s = select_gemm_kernel(gated_unit(dtype, rows, 11008), h200, {});
      CHECK(s.kernel == cutlass);
      CHECK(s.why.find("gated unit of 2048 rows or more") != std::string::npos);
      CHECK(candidate(s, cutlass).reason.find("preferred untuned") != std::string::npos);
    }
    // Below the rule's rows, or what the epilogue cannot take: cuBLASLt and the pass.
    const KernelId lt = dtype == DType::BF16 ? KernelId::LtBf16 : KernelId::LtF16;
    CHECK(select_gemm_kernel(gated_unit(dtype, 2047, 11008), h200, {}).kernel == lt);
    CHECK(select_gemm_kernel(gated_unit(dtype, 4096, 5500 + 2), h200, {}).kernel == lt);
    GemmProblem with_c = gated_unit(dtype, 4096, 11008);
    with_c.has_c = true;
    with_c.c = with_c.d;
    with_c.beta = 1.0f;
    CHECK(select_gemm_kernel(with_c, h200, {}).kernel == lt);
    // Not a gated unit: the CUTLASS rows still need a measured time.
    CHECK(select_gemm_kernel(linear(dtype, 4096, 2 * 11008, 4096), h200, {}).kernel == lt);
    // A device without sm_90a kernels: the rule has nothing to choose.
    DeviceInfo ampere = h200;
    ampere.cc_major = 8;
    ampere.cc_minor = 0;
    CHECK(select_gemm_kernel(gated_unit(dtype, 4096, 11008), ampere, {}).kernel == lt);
    // Measured times outrank the rule.
    const MeasuredTime measured = [&](KernelId id, const GemmProblem&) -> std::optional<double> {
      if (id == lt) return 900.0;
      if (id == cutlass) return 1200.0;
      return std::nullopt;
    };
    CHECK(select_gemm_kernel(gated_unit(dtype, 4096, 11008), h200, {}, measured).kernel == lt);
  }
}

TEST_CASE("selector: CUTLASS layout rules name what they refuse") {
  const DeviceInfo h200 = synthetic_h200();
  GemmProblem p = linear(DType::F16, 256, 512, 1024);
  p.act = Activation::GeluErf;
  CHECK(cutlass_layout_problem(p).empty());
  auto reason = [&](const GemmProblem& q) {
    return candidate(select_gemm_kernel(q, h200, {}), KernelId::CutlassF16Coop).reason;
  };
  GemmProblem kn = problem(DType::F16, 256, 512, 1024);  // B stored [K, N]
  CHECK(reason(kn).find("op(B) is not K-contiguous") != std::string::npos);
  GemmProblem odd_k = linear(DType::F16, 256, 512, 1000 + 3);
  CHECK(reason(odd_k).find("K = 1003 is not a multiple of 8") != std::string::npos);
  GemmProblem padded = p;
  padded.d.row_stride = 515;
  CHECK(reason(padded).find("D's row stride (515 elements)") != std::string::npos);
  padded.d.row_stride = 520;  // padded to 16 bytes: fine
  CHECK(candidate(select_gemm_kernel(padded, h200, {}), KernelId::CutlassF16Coop).feasible);
  GemmProblem strided_bias = p;
  strided_bias.has_bias = true;
  strided_bias.bias_stride = 2;
  CHECK(reason(strided_bias) == "bias is not contiguous");
  GemmProblem f32 = linear(DType::F32, 256, 512, 1024);
  CHECK(candidate(select_gemm_kernel(f32, h200, {}), KernelId::CutlassF16Coop).reason ==
        "needs f16 tensors");
  DeviceInfo ampere = h200;
  ampere.cc_major = 8;
  CHECK(candidate(select_gemm_kernel(p, ampere, {}), KernelId::CutlassF16Coop)
            .reason.find("needs compute capability 9.0") != std::string::npos);
}

TEST_CASE("selector: a batch over shared weights folds into M for the CUTLASS kernels") {
  GemmProblem p = linear(DType::BF16, 37, 512, 256);
  p.batch = 3;
  p.a = {3, 37, 256, 37 * 256, 256, 1};
  p.d = {3, 37, 512, 37 * 512, 512, 1};
  const GemmProblem folded = fold_batch_into_m(p);
  CHECK(folded.batch == 1);
  CHECK(folded.m == 111);
  CHECK(folded.op_a().rows == 111);
  CHECK(folded.d.rows == 111);
  CHECK(cutlass_layout_problem(p).empty());
  // A's batches apart (padding between them): no fold, and B shared is refused.
  p.a.batch_stride = 40 * 256;
  CHECK(fold_batch_into_m(p).batch == 3);
  CHECK(cutlass_layout_problem(p) ==
        "an operand is shared across the batch and the batch does not fold into M");
  // Every operand with its own batches runs batched.
  p.b.batch = 3;
  p.b.batch_stride = 512 * 256;
  CHECK(cutlass_layout_problem(p).empty());
}

TEST_CASE("activation table: one row per C value, in order; the functors' formulas") {
  for (std::size_t i = 0; i < std::size(kActivations); ++i) {
    CHECK(static_cast<std::size_t>(kActivations[i].act) == i);
    CHECK(is_valid_activation(static_cast<int>(i)));
  }
  CHECK_FALSE(is_valid_activation(-1));
  CHECK_FALSE(is_valid_activation(static_cast<int>(std::size(kActivations))));
  CHECK(std::string(activation_name(Activation::Silu)) == "silu");
  // Independent double-precision formulas at points across each function's
  // range. fp32 evaluation of 1 + erf(x/sqrt(2)) cancels for negative x: the
  // bound is absolute near 0 and relative to |x| beyond (far below fp16/bf16
  // output rounding either way).
  auto near = [](float got, double want, double x) {
    return std::abs(static_cast<double>(got) - want) <= 1e-6 * std::max(1.0, std::abs(x));
  };
  for (double x : {-90.0, -20.0, -3.5, -1.0, -0.25, 0.0, 0.3, 1.0, 2.75, 15.0, 90.0}) {
    CAPTURE(x);
    const auto fx = static_cast<float>(x);
    CHECK(apply_activation(Activation::None, fx) == fx);
    CHECK(apply_activation(Activation::Relu, fx) == (x > 0 ? fx : 0.0f));
    CHECK(near(apply_activation(Activation::Silu, fx), x / (1.0 + std::exp(-x)), x));
    CHECK(near(apply_activation(Activation::GeluErf, fx),
               0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))), x));
    CHECK(near(apply_activation(Activation::GeluTanh, fx),
               0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))), x));
  }
}

TEST_CASE("activation: erf GELU's fitted sigmoid form against fp64, its tail and its limits") {
  // Every 1/1024 over [-12, 12]: absolute error <= 2e-7 max(1, |x|) (the fit's 2.9e-8 on Phi
  // plus fp32 evaluation), and the relative error of the negative tail as documented in
  // activation.hpp (<= 1e-3 down to x = -4, <= 3% down to -5, where the output is -1.4e-6).
  double worst = 0, worst_at = 0;
  for (int i = -12 * 1024; i <= 12 * 1024; ++i) {
    const double x = i / 1024.0;
    const double want = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    const double got = apply_activation(Activation::GeluErf, static_cast<float>(x));
    const double err = std::abs(got - want) / std::max(1.0, std::abs(x));
    if (err > worst) worst = err, worst_at = x;
    if (x <= -1 && x >= -5) {
      CAPTURE(x);
      CHECK(std::abs(got - want) <= (x >= -4 ? 1e-3 : 3e-2) * std::abs(want));
    }
  }
  CAPTURE(worst_at);
  CHECK(worst <= 2e-7);
  CHECK(worst > 0);  // the formula is an approximation: a zero here means the sweep did not run
  // Saturation: exactly x far right, 0 (or -0) far left, no NaN from the overflowing exp.
  for (float x : {8.0f, 40.0f, 1e4f, 1e30f, 3e38f})
    CHECK(apply_activation(Activation::GeluErf, x) == x);
  for (float x : {-12.0f, -40.0f, -1e4f, -1e30f, -3e38f})
    CHECK(apply_activation(Activation::GeluErf, x) == 0.0f);
  CHECK(apply_activation(Activation::GeluErf, 0.0f) == 0.0f);
  CHECK(std::isinf(apply_activation(Activation::GeluErf, std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(apply_activation(Activation::GeluErf, std::nanf(""))));
}

TEST_CASE(
    "selector: unaligned f16 is staged where the copy pays, not on small shapes, never when "
    "forbidden") {
  const DeviceInfo h200 = synthetic_h200();
  auto big = select_gemm_kernel(problem(DType::F16, 4095, 4097, 4093), h200, {});
  CHECK(big.kernel == KernelId::LtF16);
  CHECK(big.staged);
  CHECK(candidate(big, KernelId::LtF16).reason.find("staged") != std::string::npos);
  auto small = select_gemm_kernel(problem(DType::F16, 63, 65, 67), h200, {});
  CHECK_FALSE(small.staged);
  SelectionPolicy no_staging;
  no_staging.allow_staging = false;
  CHECK_FALSE(select_gemm_kernel(problem(DType::F16, 4095, 4097, 4093), h200, no_staging).staged);
  CHECK_FALSE(
      select_gemm_kernel(problem(DType::F16, 4096, 4096, 4096), h200, {}).staged);  // aligned
  // Measured on the H200 (bench/results/2026-12-02-h200-run5), staged vs unstaged us:
  // 2049x1023x513 26.6 vs 37.5 and 3001x2999x4097 164.5 vs 632.0 stage; 511x513x509
  // 25.8 vs 17.3 must not.
  CHECK(select_gemm_kernel(problem(DType::F16, 2049, 1023, 513), h200, {}).staged);
  CHECK(select_gemm_kernel(problem(DType::F16, 3001, 2999, 4097), h200, {}).staged);
  CHECK_FALSE(select_gemm_kernel(problem(DType::F16, 511, 513, 509), h200, {}).staged);
  // The GPU tests' staged shapes stay staged.
  CHECK(select_gemm_kernel(problem(DType::F16, 1536, 1537, 1539), h200, {}).staged);
  CHECK(select_gemm_kernel(problem(DType::F16, 1531, 2053, 1543), h200, {}).staged);
  const GemmProblem padded = staged_problem(problem(DType::F16, 4095, 4097, 4093));
  CHECK(padded.k == 4096);
  CHECK(padded.n == 4104);
  CHECK(padded.m == 4095);
  CHECK(is_tensor_core_aligned(padded));
}

TEST_CASE(
    "selector: measured on the H200, small K and tiny shapes stay on lt_f16; cuda_f32 only where "
    "cuBLASLt cannot run") {
  // bench/results/2026-12-02-h200: 4096x4096x8 lt_f16 30.6 us vs cuda_f32 86.9 us;
  // 8192x1024x4 21.4 vs 51.5; 100x36x20 13.9 vs 18.6; 32x32x32 15.4 vs 16.5.
  const DeviceInfo h200 = synthetic_h200();
  for (const auto& shape :
       {std::array<std::int64_t, 3>{4096, 4096, 8}, {8192, 1024, 4}, {100, 36, 20}, {32, 32, 32}}) {
    const std::int64_t m = shape[0], n = shape[1], k = shape[2];
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    CHECK(select_gemm_kernel(problem(DType::F16, m, n, k), h200, {}).kernel == KernelId::LtF16);
  }
  DeviceInfo old_gpu = h200;
  old_gpu.cc_major = 6;  // no tensor-core f16 path
  CHECK(select_gemm_kernel(problem(DType::F16, 512, 512, 512), old_gpu, {}).kernel ==
        KernelId::CudaF32);
}

TEST_CASE("gemm problem: op(A) and op(B) read a transposed operand through swapped strides") {
  GemmProblem p = problem(DType::F16, 5, 7, 3);
  p.batch = 2;
  p.a = {2, 3, 5, 40, 1, 8};  // stored K x M, column-major-like strides
  p.trans_a = true;
  const MatrixView a = p.op_a();
  CHECK(a.batch == 2);
  CHECK(a.rows == 5);
  CHECK(a.cols == 3);
  CHECK(a.batch_stride == 40);
  CHECK(a.row_stride == 8);
  CHECK(a.col_stride == 1);
  const MatrixView b = p.op_b();  // not transposed: the stored view
  CHECK(b.rows == 3);
  CHECK(b.cols == 7);
  CHECK(b.row_stride == 7);
  CHECK(b.col_stride == 1);
}

TEST_CASE(
    "selector: allow_fp8 takes e4m3 where the model rates it faster; at decode sizes only the "
    "weight") {
  const DeviceInfo h200 = synthetic_h200();
  SelectionPolicy fp8;
  fp8.allow_fp8 = true;
  auto weights = [](GemmProblem p) {  // nn.Linear's [N, K] constant weight
    p.trans_b = true;
    p.b = {1, p.n, p.k, 0, p.k, 1};
    p.b_constant = true;
    return p;
  };
  auto s = select_gemm_kernel(weights(problem(DType::F16, 4096, 4096, 4096)), h200, fp8);
  CHECK(s.kernel == KernelId::LtFp8E4M3Fast);  // fast accumulation is rated faster
  CHECK(s.why.find("allow_fp8: estimated") != std::string::npos);
  CHECK(candidate(s, KernelId::LtFp8E4M3).reason.find("e4m3 quantization of A") !=
        std::string::npos);
  // Decode sizes take the weight-only row: half the weight bytes, A in 16 bits. The
  // row-wise rows, which pay a quantization of A and a longer launch there, do not.
  for (std::int64_t rows : {1, 8, 16}) {
    s = select_gemm_kernel(weights(problem(DType::BF16, rows, 4096, 4096)), h200, fp8);
    CHECK(s.kernel == KernelId::CudaSkinnyFp8W);
    CHECK(candidate(s, KernelId::CudaSkinnyFp8W).estimated_us <
          0.6 * candidate(s, KernelId::LtBf16).estimated_us);
  }
  // It takes at most 16 rows, a constant weight, a row-major A with 16-byte rows, and
  // enough columns for half the SMs.
  s = select_gemm_kernel(weights(problem(DType::BF16, 17, 4096, 4096)), h200, fp8);
  CHECK(candidate(s, KernelId::CudaSkinnyFp8W).reason == "M = 17 is more rows than it takes (16)");
  GemmProblem bound_weight = weights(problem(DType::F16, 8, 4096, 4096));
  bound_weight.b_constant = false;
  CHECK(candidate(select_gemm_kernel(bound_weight, h200, fp8), KernelId::CudaSkinnyFp8W)
            .reason.find("B is not a constant") == 0);
  GemmProblem column_major_a = weights(problem(DType::F16, 8, 4096, 4096));
  column_major_a.trans_a = true;
  column_major_a.a = {1, 4096, 8, 0, 8, 1};
  CHECK(candidate(select_gemm_kernel(column_major_a, h200, fp8), KernelId::CudaSkinnyFp8W)
            .reason.find("op(A) is not row-major") == 0);
  s = select_gemm_kernel(weights(problem(DType::F16, 8, 512, 4096)), h200, fp8);
  CHECK(candidate(s, KernelId::CudaSkinnyFp8W).reason.find("fewer than half the") !=
        std::string::npos);
  // Small problems the weight-only row cannot take stay 16-bit, with the FP8 estimate
  // in the reason.
  s = select_gemm_kernel(weights(problem(DType::BF16, 64, 512, 512)), h200, fp8);
  CHECK(s.kernel == KernelId::LtBf16);
  CHECK(s.why.find("lt_fp8_e4m3_fast estimated slower") != std::string::npos);
  // Without the policy, on f32, with K not a multiple of 16, or before compute capability 9.0
  // (cuBLASLt's outer-vector scales): no FP8.
  s = select_gemm_kernel(weights(problem(DType::F16, 4096, 4096, 4096)), h200, {});
  CHECK(s.kernel == KernelId::LtF16);
  CHECK(candidate(s, KernelId::LtFp8E4M3).reason.find("allow_fp8 = 0") != std::string::npos);
  s = select_gemm_kernel(weights(problem(DType::F32, 4096, 4096, 4096)), h200, fp8);
  CHECK(candidate(s, KernelId::LtFp8E4M3).reason == "FP8 runs f16 and bf16 GEMMs only");
  s = select_gemm_kernel(weights(problem(DType::F16, 4096, 4096, 4104)), h200, fp8);
  CHECK(candidate(s, KernelId::LtFp8E4M3).reason == "K = 4104 is not a multiple of 16");
  DeviceInfo ada = h200;
  ada.cc_major = 8;
  ada.cc_minor = 9;
  s = select_gemm_kernel(weights(problem(DType::F16, 4096, 4096, 4096)), ada, fp8);
  CHECK(candidate(s, KernelId::LtFp8E4M3).reason.find("9.0") != std::string::npos);
  // The weight-only row widens e4m3 with cvt (compute capability 8.9 and later).
  CHECK(candidate(select_gemm_kernel(weights(problem(DType::F16, 8, 4096, 4096)), ada, fp8),
                  KernelId::CudaSkinnyFp8W)
            .feasible);
  // Quantizing a B that is not a constant costs one more pass: the estimate says so.
  GemmProblem input_b = weights(problem(DType::F16, 4096, 4096, 4096));
  input_b.b_constant = false;
  s = select_gemm_kernel(input_b, h200, fp8);
  CHECK(candidate(s, KernelId::LtFp8E4M3).reason.find("of A and B") != std::string::npos);
  // Refusals (the accuracy gate's) take fp32 accumulation next, then the 16-bit
  // kernel; forced, a refusal is an error.
  s = select_gemm_kernel(weights(problem(DType::F16, 4096, 4096, 4096)), h200, fp8);
  refuse_and_reselect(s, weights(problem(DType::F16, 4096, 4096, 4096)), fp8, "gate (test)");
  CHECK(s.kernel == KernelId::LtFp8E4M3);
  refuse_and_reselect(s, weights(problem(DType::F16, 4096, 4096, 4096)), fp8, "gate (test)");
  CHECK(s.kernel == KernelId::LtF16);
  SelectionPolicy forced = fp8;
  forced.forced = KernelId::LtFp8E4M3;
  s = select_gemm_kernel(weights(problem(DType::F16, 64, 64, 64)), h200, forced);
  CHECK(s.kernel == KernelId::LtFp8E4M3);
  CHECK_THROWS_AS(refuse_and_reselect(s, weights(problem(DType::F16, 64, 64, 64)), forced, "gate"),
                  Error);
}

TEST_CASE("selector: an FP8 step's scratch holds each operand's row scales, then its e4m3 rows") {
  // Each part starts on a 256-byte boundary: 3 scales (12 bytes) and 3 x 32 e4m3
  // bytes take 256 each; 1000 rows of scales take 4000 -> 4096 bytes.
  CHECK(fp8_scales_bytes(3) == 256);
  CHECK(fp8_operand_bytes(3, 32) == 512);
  CHECK(fp8_operand_bytes(1000, 4096) == 4096 + 1000 * 4096);
  GemmProblem p = problem(DType::F16, 3, 5, 32);
  CHECK(fp8_scratch_bytes(p, true) == fp8_operand_bytes(3, 32));
  CHECK(fp8_scratch_bytes(p, false) == fp8_operand_bytes(3, 32) + fp8_operand_bytes(5, 32));
  CHECK(fp8_weight_bytes(p) == fp8_operand_bytes(5, 32));
  // A batch folds into M: one scale per row of every batch.
  GemmProblem batched = problem(DType::F16, 3, 5, 32);
  batched.batch = 4;
  batched.a.batch = 4;
  batched.a.batch_stride = 3 * 32;
  batched.d.batch = 4;
  batched.d.batch_stride = 3 * 5;
  CHECK(fp8_scratch_bytes(batched, true) == fp8_operand_bytes(12, 32));
}

TEST_CASE("selector: cuBLASLt's untuned choice at decode sizes of many columns is unsplit") {
  // The table's bounds (KernelInfo::unsplit_*_untuned, run 27): at most 16 rows, at
  // least 4096 columns, one batch, the 16-bit rows only.
  for (const std::pair<KernelId, DType> row :
       {std::pair{KernelId::LtF16, DType::F16}, std::pair{KernelId::LtBf16, DType::BF16}}) {
    // Plain variables: clang 14 (CI's sanitizer build) lets no lambda, CAPTURE's
    // included, name a structured binding.
    const KernelId kernel = row.first;
    const DType dtype = row.second;
    CAPTURE(kernel_name(kernel));
    for (std::int64_t m : {1, 8, 16}) {
      CHECK(unsplit_first_choice(problem(dtype, m, 4096, 4096), kernel));
      CHECK(unsplit_first_choice(problem(dtype, m, 28672, 8192), kernel));
    }
    CHECK_FALSE(unsplit_first_choice(problem(dtype, 17, 4096, 4096), kernel));
    CHECK_FALSE(unsplit_first_choice(problem(dtype, 8, 4095, 4096), kernel));
    CHECK_FALSE(unsplit_first_choice(problem(dtype, 8, 1024, 4096), kernel));
    GemmProblem batched = problem(dtype, 8, 4096, 4096);
    batched.batch = 2;
    CHECK_FALSE(unsplit_first_choice(batched, kernel));
  }
  // Not measured: f32, TF32 and FP8 keep the workspace query.
  for (KernelId kernel : {KernelId::LtF32, KernelId::LtTf32, KernelId::LtFp8E4M3})
    CHECK_FALSE(unsplit_first_choice(problem(DType::F16, 8, 4096, 4096), kernel));
}
