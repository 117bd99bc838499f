// The kernels a GEMM node can run on, one row each in kKernels: name (stable:
// it appears in plans, the tuning database and GE2_FORCE_KERNEL), family, the
// tensors it takes, the device it needs and the cost constants the selector
// ranks it by. A new kernel is a new row; backends say which rows they offer.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.hpp"

namespace ge2 {

enum class KernelId {
  LtF16,
  LtBf16,
  LtTf32,
  LtF32,
  CutlassF16Coop,
  CutlassF16Pingpong,
  CutlassF16Pingpong128,
  CutlassBf16Coop,
  CutlassBf16Pingpong,
  CutlassBf16Pingpong128,
  CudaF32,
  CudaSkinny,
  CudaSkinnyFp8W,
  LtFp8E4M3,
  LtFp8E4M3Fast,
  CpuFp8Ref,
  CpuRef
};
inline constexpr int kKernelCount = 17;

// Cutlass: ge2's own sm90a kernels (src/backends/cuda/cutlass/), one row per
// tile configuration; they compute every activation in the epilogue.
// CudaSkinny: ge2's own kernel for a few rows (decode), which streams the weight.
// CudaSkinnyFp8: the same on an e4m3 copy of a constant weight, 16-bit A (W8A16);
// only under allow_fp8.
// CublasltFp8: cuBLASLt's e4m3 GEMM behind ge2's row-wise quantization of the
// 16-bit operands (docs/fp8.md); only under the allow_fp8 precision policy.
enum class KernelFamily {
  Cublaslt,
  Cutlass,
  CudaFallback,
  CudaSkinny,
  CudaSkinnyFp8,
  CublasltFp8,
  CpuReference
};

// The selector's cost model of one kernel on a 132-SM Hopper part (scaled by SM
// count on others). It only has to rank kernels; docs/selector.md has the fit.
// cuda_skinny's limits, shared by the selector's layout rule and the kernel: its
// tensor-core form (16-bit data, compute capability 8.0 and later, two rows or
// more) takes up to 16 rows, one m16n8k16 tile; its CUDA-core form, whose time
// grows with the rows, up to 8.
inline constexpr int kSkinnyMaxRows = 16, kSkinnyCudaCoreMaxRows = 8;
// cuda_skinny_fp8w on a weight whose scales vary along K (blocks of them): a warp
// multiplies 64 k of an 8-column tile per step and scales that step's sum, so a
// block of scales must cover whole tiles (or all N) and a power of two of steps
// (found by a shift, not a division per step): 64, 128 (checkpoints' size), 256, ...
inline constexpr int kSkinnyFp8StepK = 64, kSkinnyTileColumns = 8;
constexpr bool skinny_fp8_scale_blocks_fit(std::int64_t block_n, std::int64_t block_k,
                                           std::int64_t n) {
  const std::int64_t steps = block_k / kSkinnyFp8StepK;
  return block_k % kSkinnyFp8StepK == 0 && steps > 0 && (steps & (steps - 1)) == 0 &&
         (block_n % kSkinnyTileColumns == 0 || block_n >= n);
}
// cuBLASLt's block-scaled e4m3 GEMM (Hopper: CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
// for the weight, VEC128_32F for A): a weight given with one scale per block of this
// many output channels x this many k (DeepSeek-V3's and Qwen3's FP8 checkpoints), A
// quantized with one scale per row and this many k.
inline constexpr std::int64_t kFp8ScaleBlock = 128;
// The leading dimension of a scale grid ge2 lays out for its FP8 kernels: `count`
// scales (A's rows in the block-scale mode; a weight's K blocks) padded to 16 bytes,
// as cuBLASLt's block-scale modes read them.
constexpr std::int64_t fp8_scale_ld(std::int64_t count) { return (count + 3) / 4 * 4; }
// Columns per thread block, both forms, 1-16 rows. (Run 23 measured blocks of 32
// columns 5-18% faster at 16 rows on four weights; with the kernel that can split
// K, run 24 measured them slower at 16 rows on 13 of 15 weights, by up to 28%.)
inline constexpr int kSkinnyColumnsPerBlock = 16;
// The column tiles (thread blocks per batch) of an N-column cuda_skinny GEMM.
constexpr std::int64_t skinny_column_tiles(std::int64_t n) {
  return (n + kSkinnyColumnsPerBlock - 1) / kSkinnyColumnsPerBlock;
}

// Over how many blocks the tensor-core form splits each column tile's K, up to 8
// rows: `tiles` blocks of kSkinnyColumnsPerBlock columns, `k_steps` steps of 32
// along K, `slots` blocks the device keeps resident at once (SMs x blocks per SM).
// A grid of long blocks that fills 3/4 to 2 waves of slots leaves SMs idle while
// its last blocks run; up to 4 splits of at least 128 steps each even that out.
// skinny_probe, H100, run 24, 2 and 8 rows: 1.22-1.27x on 8192 x 28672, 8192 x 29568
// and 7168 x 18432 (N x K, 1.1-1.3 waves), 1.03-1.08x on 8192 x 8192, 5120 x 27648 and
// 6144 x 16384; none of the nine weights the rule leaves whole ran faster split
// (0.84-1.00x). 9-16 rows: no split (0.91x on 8192 x 8192, 0.85-1.19x elsewhere).
constexpr int skinny_k_splits(std::int64_t rows, std::int64_t tiles, std::int64_t k_steps,
                              std::int64_t slots) {
  if (rows > kSkinnyCudaCoreMaxRows || slots <= 0) return 1;
  const bool under_one_wave = 4 * tiles >= 3 * slots && tiles < slots;
  const bool one_to_two_waves = tiles >= slots && tiles < 2 * slots;
  if (!(under_one_wave && k_steps >= 512) && !(one_to_two_waves && k_steps >= 256)) return 1;
  return static_cast<int>(std::min<std::int64_t>(4, k_steps / 128));
}

struct KernelCost {
  double peak_tflops;         // large aligned problems
  double launch_us;           // fixed cost of one step, as an event-timed execute sees it
  double bandwidth_fraction;  // of nominal device bandwidth, on memory-bound shapes
  int tile_m, tile_n;         // output tile of one thread block
};

struct KernelInfo {
  KernelId id;
  std::string_view name;
  KernelFamily family;
  std::optional<DType> dtype;  // the tensors it takes; empty: every dtype
  bool tf32;                   // rounds f32 inputs to TF32 (needs allow_tf32)
  int min_compute_capability;  // major*10 + minor; 0 for the CPU
  KernelCost cost;
  // Chosen only on a measured time (the tuning database) or when forced, never
  // on the cost model's estimate alone: for kernels the model is known to rank
  // too well (the CUTLASS rows, measured slower than cuBLASLt plus its separate
  // activation pass on most FFN shapes: docs/cutlass.md).
  bool needs_measurement = false;
  // Above this many rows (M, a folded batch included) the same holds; 0: no limit.
  // For a kernel whose time grows with the rows faster than the model says.
  std::int64_t max_rows_untuned = 0;
  // Quantizes f16/bf16 operands to FP8 e4m3 (a scale per row of A and per output
  // channel of B) and multiplies those: chosen only under allow_fp8 and kept only
  // within its error budget.
  bool fp8 = false;
  // Computes a gated unit's act(gate) * up in its epilogue, from the accumulator's
  // [gate | up] halves (the GEMM the gate/up concatenation made), so the plan
  // runs no gated_mul pass after it (docs/cutlass.md).
  bool gated_epilogue = false;
  // From this many rows (M, a folded batch included) a gated unit whose act(gate) * up
  // this kernel's epilogue takes runs on it untuned, whatever the model estimates; 0:
  // never. Measured (bf16/f16, SiLU, hidden 2048-4096, I 5632-14336; runs 14 and 17,
  // docs/cutlass.md): the fused step 1.01-1.08x cuBLASLt plus its gated_mul pass from
  // 2048 rows on, 0.89x at 512 and 0.45x at 16; the model ranks it a little slower.
  std::int64_t gated_min_rows_untuned = 0;
  // From this many rows a GEMM whose activation no cuBLASLt epilogue computes (erf
  // GELU, SiLU, QuickGELU: cuBLASLt's step runs a separate pass over D) runs on this
  // kernel untuned, whatever the model estimates; 0: never. Measured (H100, run 20,
  // GELU-erf FFN blocks of hidden 4096, I 11008, f16 and bf16, replayed): the tuner
  // chose the 128x128 erf instance at 2048 and 4096 tokens (and at 8192 in three of
  // four runs), and those blocks ran 1.04-1.09x faster than untuned ones on cuBLASLt
  // + erf pass (4096 tokens: 1131 against 1228 us, 1075 against 1175; with this rule
  // the untuned blocks ran 1165 and 1101); at 8192 tokens the forms were within 1%;
  // at 512 the tuner kept cuBLASLt + pass, the CUTLASS layer 10% slower there.
  std::int64_t pass_act_min_rows_untuned = 0;
  // The same rule's bounds: at most this many rows and B of at most this many elements
  // (0: no bound). For cuda_skinny's tensor-core form on small weights, where cuBLASLt's
  // separate pass is a fixed 1.5-2.5 us beside a GEMM of 4-10 us.
  std::int64_t pass_act_max_rows_untuned = 0;
  std::int64_t pass_act_max_b_elements_untuned = 0;
  // And K of at most this many (0: no bound). The 128x128 CUTLASS rows: the fused
  // epilogue saves a pass over D (M x N) while their mainloop runs behind cuBLASLt's
  // where K is deep, a loss that grows with K. Measured (H100, run 25,
  // bench/cutlass_layers.py, erf GELU, f16 and bf16): fused 1.06-1.23x cuBLASLt + pass at
  // K = 1024 and 4096 (4096 x {4096, 11008, 14336} x 4096, 16384 and 2048 x 4096 x 1024),
  // 0.93-0.94x at 4096 x 4096 x 11008, where PyTorch's linear + gelu was 7% faster.
  std::int64_t pass_act_max_k_untuned = 0;
  // cuBLASLt rows: GEMMs of one batch, at most this many rows and at least
  // `unsplit_min_columns_untuned` columns (output features) take the heuristic's
  // first algorithm for no workspace untuned, not its first under the context's
  // workspace (0: never). There the latter is often split-K, and the former was
  // faster in 30 of the 32 cases where the two differ on an H200 (up to 13%, 2
  // equal) and in 23 of 29 on an H100 (7-13% at 4096 x 4096), at most 3.4% slower
  // in the other 6 (4096 x 11008); 12 nn.Linear weights with N >= 4096 at 1, 8 and
  // 16 rows, f16 and bf16. With fewer columns the devices disagree (1024 x 4096:
  // split-K up to 2.8x faster on the H200, 15-26% slower on the H100). Run 27,
  // bench/results/2026-12-06-h100-run27, docs/tunedb.md ("Decode sizes").
  std::int64_t unsplit_max_rows_untuned = 0;
  std::int64_t unsplit_min_columns_untuned = 0;
  // Of the FP8 rows, quantizes only the constant weight (per output channel, once,
  // at compile) and reads A as it is stored, in 16 bits: A's error is not added, a
  // deferred activation is not its to apply, and the weight streams at one byte
  // per element.
  bool fp8_weight_only = false;
  // Of the FP8 rows that quantize A, also runs a weight given with scales per
  // kFp8ScaleBlock x kFp8ScaleBlock block (GemmProblem::b_scale_block_{n,k}): A is
  // then quantized per row and kFp8ScaleBlock k, and each block's scale applies to
  // its own partial sums. The others read one scale per output channel only.
  bool fp8_block_scales = false;
};

// Fitted to bench_gemm on the H200 (bench/results/2026-12-02-h200-run3):
// peak rates from the large aligned shapes, fixed cost and effective bandwidth
// from the small-K and tiny shapes.
inline constexpr std::array<KernelInfo, kKernelCount> kKernels{{
    {.id = KernelId::LtF16,
     .name = "lt_f16",
     .family = KernelFamily::Cublaslt,
     .dtype = DType::F16,
     .tf32 = false,
     .min_compute_capability = 70,
     .cost = {740.0, 12.0, 0.45, 128, 128},
     .unsplit_max_rows_untuned = 16,
     .unsplit_min_columns_untuned = 4096},
    {.id = KernelId::LtBf16,
     .name = "lt_bf16",
     .family = KernelFamily::Cublaslt,
     .dtype = DType::BF16,
     .tf32 = false,
     .min_compute_capability = 80,
     .cost = {740.0, 12.0, 0.45, 128, 128},
     .unsplit_max_rows_untuned = 16,
     .unsplit_min_columns_untuned = 4096},
    {KernelId::LtTf32,
     "lt_tf32",
     KernelFamily::Cublaslt,
     DType::F32,
     true,
     80,
     {400.0, 12.0, 0.45, 128, 128}},
    {KernelId::LtF32,
     "lt_f32",
     KernelFamily::Cublaslt,
     DType::F32,
     false,
     0,
     {50.0, 12.0, 0.45, 128, 64}},
    // Cooperative 128x256x64 tiles on 2x1 clusters for large problems, ping-pong
    // 64x128x64 tiles where M or N is small, ping-pong 128x128x64 on 2x1 clusters
    // to hide a costly epilogue; chosen on measurement only.
    {KernelId::CutlassF16Coop,
     "cutlass_f16_128x256",
     KernelFamily::Cutlass,
     DType::F16,
     false,
     90,
     {700.0, 12.0, 0.45, 128, 256},
     true},
    {KernelId::CutlassF16Pingpong,
     "cutlass_f16_64x128",
     KernelFamily::Cutlass,
     DType::F16,
     false,
     90,
     {600.0, 12.0, 0.45, 64, 128},
     true},
    {KernelId::CutlassF16Pingpong128,
     "cutlass_f16_128x128",
     KernelFamily::Cutlass,
     DType::F16,
     false,
     90,
     {680.0, 12.0, 0.45, 128, 128},
     true,
     0,
     false,
     true,
     2048,
     2048,
     0,
     0,
     4096},
    {KernelId::CutlassBf16Coop,
     "cutlass_bf16_128x256",
     KernelFamily::Cutlass,
     DType::BF16,
     false,
     90,
     {700.0, 12.0, 0.45, 128, 256},
     true},
    {KernelId::CutlassBf16Pingpong,
     "cutlass_bf16_64x128",
     KernelFamily::Cutlass,
     DType::BF16,
     false,
     90,
     {600.0, 12.0, 0.45, 64, 128},
     true},
    {KernelId::CutlassBf16Pingpong128,
     "cutlass_bf16_128x128",
     KernelFamily::Cutlass,
     DType::BF16,
     false,
     90,
     {680.0, 12.0, 0.45, 128, 128},
     true,
     0,
     false,
     true,
     2048,
     2048,
     0,
     0,
     4096},
    {KernelId::CudaF32,
     "cuda_f32",
     KernelFamily::CudaFallback,
     std::nullopt,
     false,
     0,
     {13.0, 14.0, 0.10, 64, 64}},
    // Up to 16 rows against a K-contiguous weight: a GEMV-like stream of B. One
    // row runs on CUDA cores (src/backends/cuda/skinny_gemm.cuh) at 3.4-4.4 TB/s
    // on the H200 (run 11, bench/skinny_probe.cu), as fast as cuBLASLt or faster;
    // the model (one-row tiles, a rate above 0.45 times any HBM bandwidth in
    // bytes/s as flop/s) ranks that row. From two rows 16-bit data runs on tensor
    // cores (skinny_mma.cuh), its time flat in the rows. On weights of 24 MB and more
    // it runs -3% to +20% of cuBLASLt's time even where cuBLASLt adds a separate
    // activation pass, so there it is chosen only on a measured time; on weights up to
    // 20 MB with an activation cuBLASLt has no epilogue for it is chosen untuned at 2-8
    // rows, where that pass is a fixed 1.5-2.5 us beside a GEMM of 4-10 us (H100, run 23,
    // bench/skinny_layers.py, f16 and bf16, 2-8 rows x 11 weights of 4-19 MB: 1.13-1.37x
    // cuBLASLt and its erf pass, 0.99-1.10x at 8 x 2048 x 4096 and 8 x 1280 x 5120;
    // above the bound 8 x 3072 x 4096 0.88x, 4096 x 4096 0.75-0.88x).
    {KernelId::CudaSkinny,
     "cuda_skinny",
     KernelFamily::CudaSkinny,
     std::nullopt,
     false,
     70,
     {4.0, 5.0, 0.85, 1, 16},
     false,
     1,
     false,
     false,
     0,
     2,
     8,
     10 << 20},
    // cuda_skinny's tensor-core form reading the e4m3 copy of a constant nn.Linear
    // weight that lt_fp8_e4m3 uses (a scale per output channel, made once at compile),
    // each byte widened to the 16-bit dtype exactly, A in 16 bits (W8A16), up to 16
    // rows: decode streams half the weight bytes. Rated as cuda_skinny's stream of
    // one-byte weights (0.85 of the bandwidth) with a tensor-core rate that keeps
    // 16 rows memory-bound.
    {.id = KernelId::CudaSkinnyFp8W,
     .name = "cuda_skinny_fp8w",
     .family = KernelFamily::CudaSkinnyFp8,
     .dtype = std::nullopt,
     .tf32 = false,
     .min_compute_capability = 89,
     .cost = {200.0, 5.0, 0.85, 16, 16},
     .fp8 = true,
     .fp8_weight_only = true},
    // The e4m3 tensor-core GEMM on operands ge2 quantizes row-wise, with cuBLASLt's
    // outer-vector scales (one per row of A, one per output channel; Hopper, sm_90):
    // about 1300 TFLOP/s for torch._scaled_mm at 8192^3 on the H200 (docs/fp8.md,
    // run 13h); two launches (quantize A, matmul) at least. On a weight given with
    // 128 x 128 block scales, cuBLASLt's block-scale modes instead (A per row and
    // 128 k).
    {.id = KernelId::LtFp8E4M3,
     .name = "lt_fp8_e4m3",
     .family = KernelFamily::CublasltFp8,
     .dtype = std::nullopt,
     .tf32 = false,
     .min_compute_capability = 90,
     .cost = {1200.0, 18.0, 0.45, 128, 128},
     .fp8 = true,
     .fp8_block_scales = true},
    // The same with cuBLASLt's fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM:
    // no periodic promotion of the tensor cores' partial sums to fp32): FP8 blocks
    // 1.49-1.61x the 16-bit plan with it, 1.41-1.55x without (docs/fp8.md, runs
    // 13e/13f). Rated faster, so the accuracy gate judges it first and takes
    // lt_fp8_e4m3 where it fails.
    {KernelId::LtFp8E4M3Fast,
     "lt_fp8_e4m3_fast",
     KernelFamily::CublasltFp8,
     std::nullopt,
     false,
     90,
     {1240.0, 18.0, 0.45, 128, 128},
     false,
     0,
     true},
    // The same arithmetic on the host: each row of A and each output channel of B
    // rounded to e4m3 through its own scale, then the reference loop. Rated twice
    // cpu_ref's rate, as the device rates e4m3 against 16 bits, so allow_fp8 takes
    // it on the CPU backend too and the policy, its gate and its fallbacks run
    // without a GPU.
    {.id = KernelId::CpuFp8Ref,
     .name = "cpu_fp8_ref",
     .family = KernelFamily::CpuReference,
     .dtype = std::nullopt,
     .tf32 = false,
     .min_compute_capability = 0,
     .cost = {0.02, 1.0, 1.0, 1, 1},
     .fp8 = true,
     .fp8_block_scales = true},
    {KernelId::CpuRef,
     "cpu_ref",
     KernelFamily::CpuReference,
     std::nullopt,
     false,
     0,
     {0.01, 1.0, 1.0, 1, 1},
     false,
     0,
     false,
     true},
}};

constexpr bool kernel_rows_in_enum_order() {
  for (int i = 0; i < kKernelCount; ++i)
    if (static_cast<int>(kKernels[static_cast<std::size_t>(i)].id) != i) return false;
  return true;
}
static_assert(kernel_rows_in_enum_order(), "kKernels must list every KernelId once, in order");
static_assert(static_cast<int>(KernelId::CpuRef) + 1 == kKernelCount, "kKernelCount is stale");

constexpr const KernelInfo& kernel_info(KernelId id) {
  return kKernels[static_cast<std::size_t>(id)];
}
constexpr std::string_view kernel_name(KernelId id) { return kernel_info(id).name; }
constexpr bool is_cublaslt_kernel(KernelId id) {
  return kernel_info(id).family == KernelFamily::Cublaslt;
}
constexpr bool is_cutlass_kernel(KernelId id) {
  return kernel_info(id).family == KernelFamily::Cutlass;
}
constexpr bool is_fp8_kernel(KernelId id) { return kernel_info(id).fp8; }
constexpr bool has_gated_epilogue(KernelId id) { return kernel_info(id).gated_epilogue; }
constexpr bool is_cublaslt_fp8_kernel(KernelId id) {
  return kernel_info(id).family == KernelFamily::CublasltFp8;
}
// An FP8 row that quantizes A (every execution), so that it can also apply the
// activation of the GEMM that produced A (GemmProblem::a_act).
constexpr bool quantizes_a(KernelId id) {
  return kernel_info(id).fp8 && !kernel_info(id).fp8_weight_only;
}
std::optional<KernelId> kernel_from_name(std::string_view name);
// The cuBLASLt row for `dtype` without TF32: what ge2's own kernels fall back to
// for executions their fast path cannot take (unaligned pointers).
constexpr KernelId cublaslt_kernel_for(DType dtype) {
  for (const KernelInfo& kernel : kKernels)
    if (kernel.family == KernelFamily::Cublaslt && !kernel.tf32 && kernel.dtype == dtype)
      return kernel.id;
  return KernelId::LtF32;
}
static_assert(cublaslt_kernel_for(DType::BF16) == KernelId::LtBf16 &&
              cublaslt_kernel_for(DType::F16) == KernelId::LtF16 &&
              cublaslt_kernel_for(DType::F32) == KernelId::LtF32);

inline constexpr std::array<KernelId, kKernelCount> kAllKernels = [] {
  std::array<KernelId, kKernelCount> ids{};
  for (int i = 0; i < kKernelCount; ++i)
    ids[static_cast<std::size_t>(i)] = kKernels[static_cast<std::size_t>(i)].id;
  return ids;
}();

// The rows of the given families, in table order: what a backend offers, so that
// a new row of an offered family needs no second list.
template <KernelFamily... Families>
constexpr bool in_families(KernelFamily family) {
  return ((family == Families) || ...);
}
template <KernelFamily... Families>
constexpr auto kernels_of() {
  constexpr std::size_t count = [] {
    std::size_t n = 0;
    for (const KernelInfo& kernel : kKernels) n += in_families<Families...>(kernel.family) ? 1 : 0;
    return n;
  }();
  std::array<KernelId, count> ids{};
  std::size_t i = 0;
  for (const KernelInfo& kernel : kKernels)
    if (in_families<Families...>(kernel.family)) ids[i++] = kernel.id;
  return ids;
}

}  // namespace ge2
