#include "select/selector.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include "core/error.hpp"

namespace ge2 {

DeviceInfo synthetic_h200() {
  DeviceInfo device;
  device.has_cuda = true;
  device.cc_major = 9;
  device.cc_minor = 0;
  device.sm_count = 132;
  device.name = "NVIDIA H200 (synthetic)";
  device.cublaslt_version = 130100;
  device.memory_bandwidth_gbs = 4200;
  return device;
}

namespace {

// Unaligned leading dimensions push cuBLASLt's 16-bit paths onto old kernels:
// 3.4-3.6x the staged aligned kernel's time at 4095x4097x4093 on the H200
// (docs/benchmarks.md, run 5).
constexpr double kUnalignedTensorCorePenalty = 0.2;

// Staging must never make a layer slower, and the model is least accurate on
// small unaligned shapes (run 5: 511x513x509 predicted 25.1 staged vs 26.9
// unstaged, measured 25.8 vs 17.3). Stage only for a predicted gain of 15% or more.
constexpr double kStagingRequiredGain = 0.85;

std::string dtype_rule(const KernelInfo& kernel, const GemmProblem& problem,
                       const SelectionPolicy& policy) {
  const DType dtype = problem.dtype;
  if (kernel.dtype && *kernel.dtype != dtype)
    return fmt::format("needs {} tensors", dtype_name(*kernel.dtype));
  if (kernel.tf32 && !policy.allow_tf32)
    return "TF32 not allowed by the compile options (allow_tf32 = 0)";
  // A weight given in e4m3 read as given changes no number the graph defines
  // (beyond its 16-bit rounding): no precision decision, so no allow_fp8.
  if (kernel.fp8 && !policy.allow_fp8 && !(kernel.fp8_weight_only && problem.b_e4m3))
    return "FP8 not allowed by the compile options (allow_fp8 = 0)";
  if (kernel.fp8 && dtype == DType::F32) return "FP8 runs f16 and bf16 GEMMs only";
  if (kernel.fp8 && !kernel.fp8_weight_only && problem.b_scale_block_k > 0) {
    const std::string given =
        fmt::format("the weight is given in e4m3 with a scale per {}x{} block of op(B)^T",
                    problem.b_scale_block_n, problem.b_scale_block_k);
    if (!kernel.fp8_block_scales)
      return given +
             "; this row reads one scale per output channel (cuBLASLt has no fast "
             "accumulation with block scales)";
    if (!fp8_block_scaled(problem))
      return fmt::format("{}; this row reads blocks of {}x{} only (cuBLASLt's block-scale mode)",
                         given, kFp8ScaleBlock, kFp8ScaleBlock);
    if (const std::string layout = fp8_block_mode_problem(problem); !layout.empty())
      return given + "; " + layout;
  }
  return "";
}

std::string device_rule(const KernelInfo& kernel, const DeviceInfo& device) {
  if (kernel.family == KernelFamily::CpuReference)
    return device.has_cuda ? "the context runs on CUDA (device pointers)" : "";
  if (!device.has_cuda) return "no CUDA device in this context";
  if (device.compute_capability() < kernel.min_compute_capability)
    return fmt::format("needs compute capability {}.{}, device has {}.{}",
                       kernel.min_compute_capability / 10, kernel.min_compute_capability % 10,
                       device.cc_major, device.cc_minor);
  return "";
}

// The device's memory bandwidth for the model, GB/s (100 where the device did not say).
double bandwidth_gbs(const DeviceInfo& device) {
  return device.memory_bandwidth_gbs > 0 ? device.memory_bandwidth_gbs : 100.0;
}

// One elementwise pass run after a GEMM that moves `bytes`: a launch and 0.8 of
// the bandwidth (the erf-GELU / SiLU pass after cuBLASLt, the gated_mul pass).
double separate_pass_us(double bytes, const DeviceInfo& device) {
  return 3.0 + bytes / (bandwidth_gbs(device) * 1e3 * 0.8);
}

double estimate_us(KernelId kernel, const GemmProblem& p, const DeviceInfo& device, bool aligned,
                   std::string& basis) {
  const KernelCost& model = kernel_info(kernel).cost;
  const double sm_scale = device.sm_count > 0 ? device.sm_count / 132.0 : 1.0;
  const bool host = kernel_info(kernel).family == KernelFamily::CpuReference;
  double peak = model.peak_tflops * (host ? 1.0 : sm_scale);
  basis = fmt::format("model {:.0f} TFLOP/s peak", peak);
  if (is_cublaslt_kernel(kernel) && kernel != KernelId::LtF32 && !aligned) {
    peak *= kUnalignedTensorCorePenalty;
    basis += ", unaligned leading dimension x0.2";
  }
  // Tiles that do not fill the last wave of SMs idle part of the chip.
  const double tiles = std::ceil(static_cast<double>(p.m) / model.tile_m) *
                       std::ceil(static_cast<double>(p.n) / model.tile_n) * p.batch;
  const double slots = std::max(1, device.sm_count);
  const double waves = std::ceil(tiles / slots);
  const double fill = host ? 1.0 : tiles / (waves * slots);
  const double tile_area = static_cast<double>(model.tile_m) * model.tile_n;
  const double edge = static_cast<double>(p.m) * p.n * p.batch / (tiles * tile_area);
  const double compute_us = p.flops() / (peak * 1e6 * fill * edge);
  const double bandwidth = bandwidth_gbs(device);
  // A weight-only FP8 row streams B's e4m3 copy: one byte per element.
  const double b_bytes_saved = kernel_info(kernel).fp8_weight_only
                                   ? static_cast<double>(p.k) * p.n * p.batch *
                                         (static_cast<double>(dtype_size(p.dtype)) - 1.0)
                                   : 0.0;
  const double memory_us =
      (p.min_bytes() - b_bytes_saved) / (bandwidth * 1e3 * model.bandwidth_fraction);
  double total = model.launch_us + std::max(compute_us, memory_us);
  if (is_cublaslt_fp8_kernel(kernel)) {
    // Quantizing op(A) (and a B that is not a constant) reads it once (a row's
    // second read hits the cache) and writes one byte per element.
    const double elements = static_cast<double>(p.m) * p.k + (p.b_constant ? 0.0 : 1.0 * p.k * p.n);
    total += elements * (dtype_size(p.dtype) + 1.0) / (bandwidth * 1e3 * 0.6);
    basis += ", + e4m3 quantization of " + std::string(p.b_constant ? "A" : "A and B");
  }
  if (runs_separate_activation_pass(kernel, p.act)) {
    // No cuBLASLt epilogue computes it (erf GELU, SiLU): one more pass over D.
    const double d_bytes = 2.0 * static_cast<double>(p.m) * p.n * p.batch * dtype_size(p.dtype);
    total += separate_pass_us(d_bytes, device);
    basis += fmt::format(", + separate {} pass", activation_name(p.act));
  }
  return total;
}

// The gated_mul pass an unfused gated unit runs after its GEMM: the 2I-wide
// result read once, the I-wide product written.
double gated_pass_us(const GemmProblem& p, const DeviceInfo& device) {
  return separate_pass_us(1.5 * static_cast<double>(p.m) * p.n * p.batch * dtype_size(p.dtype),
                          device);
}

}  // namespace

GemmProblem staged_problem(const GemmProblem& p) {
  const std::int64_t align = 16 / static_cast<std::int64_t>(dtype_size(p.dtype));
  const std::int64_t kp = (p.k + align - 1) / align * align, np = (p.n + align - 1) / align * align;
  GemmProblem s = p;
  s.k = kp;
  s.n = np;
  s.trans_a = s.trans_b = false;
  s.a = {p.batch, p.m, kp, p.a.batch_stride == 0 ? 0 : p.m * kp, kp, 1};
  s.b = {p.batch, kp, np, p.b.batch_stride == 0 ? 0 : kp * np, np, 1};
  s.d = {p.batch, p.m, np, p.m * np, np, 1};
  if (p.has_c) s.c = s.d;
  s.bias_stride = 1;
  return s;
}

double staging_bytes(const GemmProblem& p) {
  const GemmProblem s = staged_problem(p);
  const double e = static_cast<double>(dtype_size(p.dtype));
  const double a = static_cast<double>(p.m) * p.k * (p.a.batch_stride == 0 ? 1 : p.batch);
  const double b = static_cast<double>(p.k) * p.n * (p.b.batch_stride == 0 ? 1 : p.batch);
  const double d = static_cast<double>(p.m) * p.n * p.batch;
  const double a_s = static_cast<double>(s.m) * s.k * (p.a.batch_stride == 0 ? 1 : p.batch);
  const double b_s = static_cast<double>(s.k) * s.n * (p.b.batch_stride == 0 ? 1 : p.batch);
  const double d_s = static_cast<double>(s.m) * s.n * p.batch;
  // Copy A and B in (read, write padded), C in if present, D out (read padded, write).
  return e * (a + a_s + b + b_s + (p.has_c ? d + d_s : 0.0) + d_s + d);
}

bool unsplit_first_choice(const GemmProblem& p, KernelId kernel) {
  const KernelInfo& info = kernel_info(kernel);
  return info.unsplit_max_rows_untuned > 0 && p.batch == 1 &&
         p.m <= info.unsplit_max_rows_untuned && p.n >= info.unsplit_min_columns_untuned;
}

std::string cublaslt_layout_problem(const GemmProblem& p) {
  auto unit_stride = [](const MatrixView& v) {
    return v.col_stride == 1 || v.row_stride == 1 || v.rows == 1 || v.cols == 1;
  };
  if (!unit_stride(p.a)) return "A has no unit-stride dimension";
  if (!unit_stride(p.b)) return "B has no unit-stride dimension";
  if (p.d.col_stride != 1 && p.d.cols != 1) return "D is not row-major (its last stride is not 1)";
  if (p.has_c && p.c.col_stride != 1 && p.c.cols != 1) return "C is not row-major";
  if (p.has_bias && p.bias_stride != 1) return "bias is not contiguous";
  return "";
}

GemmProblem fold_batch_into_m(const GemmProblem& p) {
  if (p.batch == 1 || p.b.batch_stride != 0) return p;
  const MatrixView a = p.op_a();
  auto back_to_back = [&](const MatrixView& v) {
    return v.col_stride == 1 && v.batch_stride == p.m * v.row_stride;
  };
  if (!back_to_back(a) || !back_to_back(p.d) || (p.has_c && !back_to_back(p.c)) ||
      (p.gated && !back_to_back(p.gated->out)))
    return p;
  GemmProblem folded = p;
  folded.m = p.m * p.batch;
  folded.batch = 1;
  for (MatrixView* v : {&folded.a, &folded.c, &folded.d}) {
    v->batch = 1;
    v->batch_stride = 0;
  }
  (p.trans_a ? folded.a.cols : folded.a.rows) = folded.m;
  folded.d.rows = folded.m;
  if (folded.has_c) folded.c.rows = folded.m;
  if (folded.gated)
    folded.gated->out = {1, folded.m, p.gated->out.cols, 0, p.gated->out.row_stride, 1};
  return folded;
}

std::string gated_epilogue_problem(const GemmProblem& p, KernelId kernel) {
  if (!has_gated_epilogue(kernel))
    return fmt::format("kernel '{}' has no gated epilogue", kernel_name(kernel));
  if (!p.gated) return "not a gated unit";
  if (p.has_c) return "the gated epilogue takes no C";
  if (p.act != Activation::None) return "the GEMM has its own activation";
  if (p.n % 2 != 0) return fmt::format("N = {} is odd", p.n);
  if (!is_cutlass_kernel(kernel)) return "";
  // The CUTLASS instances (gated_epilogue.cuh) read a weight copy interleaved in
  // blocks of eight rows and store pairs of outputs.
  if (p.n % 16 != 0) return fmt::format("I = N / 2 = {} is not a multiple of 8", p.n / 2);
  if (!p.trans_b) return "B is not in [N, K] layout (trans_b)";
  if (p.b.batch_stride != 0) return "B has a batch";
  if (p.gated->out.col_stride != 1 && p.gated->out.cols != 1)
    return "the gated output is not row-major";
  if (p.gated->out.row_stride % 2 != 0 || p.gated->out.batch_stride % 2 != 0)
    return "the gated output's rows do not start on 4-byte boundaries";
  return "";
}

bool runs_separate_activation_pass(KernelId kernel, Activation act) {
  return (is_cublaslt_kernel(kernel) || is_cublaslt_fp8_kernel(kernel)) &&
         activation_info(act).cublaslt == LtEpilogue::kNone;
}

std::string fp8_layout_problem(const GemmProblem& problem) {
  const GemmProblem p = fold_batch_into_m(problem);
  if (p.batch > 1) return fmt::format("a batch of {} that does not fold into M", p.batch);
  if (p.k % 16 != 0) return fmt::format("K = {} is not a multiple of 16", p.k);
  const std::int64_t vector = 16 / static_cast<std::int64_t>(dtype_size(p.dtype));
  if (p.d.col_stride != 1 && p.d.cols != 1) return "D is not row-major";
  if (p.has_c && p.c.col_stride != 1 && p.c.cols != 1) return "C is not row-major";
  if (p.n % vector != 0) return fmt::format("N = {} is not a multiple of {}", p.n, vector);
  if (p.d.row_stride % vector != 0 || (p.has_c && p.c.row_stride % vector != 0))
    return "a row stride of C or D is not a multiple of 16 bytes";
  if (p.has_bias && p.bias_stride != 1) return "bias is not contiguous";
  return "";
}

namespace {
std::size_t round_up_256(double bytes) {
  return (static_cast<std::size_t>(bytes) + 255) / 256 * 256;
}
}  // namespace

std::size_t fp8_scales_bytes(std::int64_t rows) {
  return round_up_256(4.0 * static_cast<double>(rows));
}

namespace {
// `scale_count` scales, then the rows x k e4m3 codes, each part on a 256-byte boundary.
std::size_t scaled_operand_bytes(std::int64_t scale_count, std::int64_t rows, std::int64_t k) {
  return fp8_scales_bytes(scale_count) + round_up_256(static_cast<double>(rows) * k);
}
}  // namespace

std::size_t fp8_operand_bytes(std::int64_t rows, std::int64_t k) {
  return scaled_operand_bytes(rows, rows, k);
}

std::size_t fp8_scratch_bytes(const GemmProblem& problem, bool b_prepared) {
  const GemmProblem p = fold_batch_into_m(problem);
  return scaled_operand_bytes(fp8_a_scale_count(p), p.m, p.k) +
         (b_prepared ? 0 : fp8_operand_bytes(p.n, p.k));
}

bool fp8_block_scaled(const GemmProblem& problem) {
  return problem.b_scale_block_n == kFp8ScaleBlock && problem.b_scale_block_k == kFp8ScaleBlock;
}

std::string fp8_block_mode_problem(const GemmProblem& problem) {
  if (!fp8_block_scaled(problem)) return "";
  const GemmProblem p = fold_batch_into_m(problem);
  if (p.m % 4 != 0)
    return fmt::format(
        "the block-scale mode takes M a multiple of 4 (A's scales per 128 k), M = {}", p.m);
  if (p.k % (4 * kFp8ScaleBlock) != 0)
    return fmt::format(
        "the block-scale mode takes K a multiple of {} (the weight's scale grid), "
        "K = {}",
        4 * kFp8ScaleBlock, p.k);
  return "";
}

std::int64_t fp8_a_scale_count(const GemmProblem& problem) {
  if (!fp8_block_scaled(problem)) return problem.m;
  return fp8_scale_ld(problem.m) * ((problem.k + kFp8ScaleBlock - 1) / kFp8ScaleBlock);
}

std::int64_t fp8_weight_scale_count(const GemmProblem& problem) {
  if (problem.b_scale_block_k <= 0) return problem.n;
  return ((problem.n + problem.b_scale_block_n - 1) / problem.b_scale_block_n) *
         fp8_scale_ld((problem.k + problem.b_scale_block_k - 1) / problem.b_scale_block_k);
}

std::size_t fp8_weight_bytes(const GemmProblem& problem) {
  return scaled_operand_bytes(fp8_weight_scale_count(problem), problem.n, problem.k);
}

GemmProblem with_rows(const GemmProblem& problem, std::int64_t rows) {
  GemmProblem p = problem;
  p.m = rows;
  (p.trans_a ? p.a.cols : p.a.rows) = rows;
  p.d.rows = rows;
  if (p.has_c) p.c.rows = rows;
  return p;
}

namespace {

// What ge2's own weight kernels (CUTLASS, cuda_skinny) read: K contiguous in
// op(A) and op(B) (B as nn.Linear's [N, K] weight, trans_b), row-major D and C.
std::string k_contiguous_problem(const GemmProblem& p) {
  const MatrixView a = p.op_a(), b = p.op_b();
  if (a.col_stride != 1 && a.cols != 1) return "op(A) is not row-major (K is not contiguous)";
  if (b.row_stride != 1 && b.rows != 1)
    return "op(B) is not K-contiguous (ge2's own kernels take B as an [N, K] weight, trans_b)";
  if (p.d.col_stride != 1) return "D is not row-major";
  if (p.has_c && p.c.col_stride != 1) return "C is not row-major";
  return "";
}

// The first of the named strides (elements) that is not a whole number of
// 16-byte vectors of `vector` elements; empty when all are.
std::string unaligned_stride(std::initializer_list<std::pair<const char*, std::int64_t>> strides,
                             std::int64_t vector) {
  for (const auto& [name, stride] : strides)
    if (stride % vector != 0)
      return fmt::format("{} ({} elements) is not a multiple of 16 bytes", name, stride);
  return "";
}

// What both cuda_skinny rows need of `p` (the problem they run, a batch folded
// where it folds): sizes their int indexing holds, and a block for half the SMs.
std::string skinny_grid_problem(const GemmProblem& p, const DeviceInfo& device) {
  // The kernel's K loop counts in int and steps past K by up to 512 elements.
  if (p.n > 2147483647 || p.k > (std::int64_t{1} << 30) || p.batch > 65535)
    return "N exceeds 2^31 - 1, K 2^30, or the batch 65535";
  // A block for half the SMs at least: fewer columns leave most of the chip
  // idle while each warp streams its weight rows.
  const std::int64_t blocks = skinny_column_tiles(p.n) * p.batch;
  if (2 * blocks < std::max(1, device.sm_count))
    return fmt::format("N = {} gives {} blocks of {} columns, fewer than half the {} SMs", p.n,
                       blocks, kSkinnyColumnsPerBlock, device.sm_count);
  return "";
}

}  // namespace

std::string cutlass_layout_problem(const GemmProblem& problem) {
  const GemmProblem p = fold_batch_into_m(problem);
  const std::int64_t vector = 16 / static_cast<std::int64_t>(dtype_size(p.dtype));
  if (std::string reason = k_contiguous_problem(p); !reason.empty()) return reason;
  if (p.has_bias && p.bias_stride != 1) return "bias is not contiguous";
  if (p.k % vector != 0) return fmt::format("K = {} is not a multiple of {}", p.k, vector);
  if (p.n % vector != 0) return fmt::format("N = {} is not a multiple of {}", p.n, vector);
  if (std::string reason = unaligned_stride({{"A's row stride", p.op_a().row_stride},
                                             {"B's row stride", p.op_b().col_stride},
                                             {"D's row stride", p.d.row_stride},
                                             {"C's row stride", p.has_c ? p.c.row_stride : vector},
                                             {"A's batch stride", p.a.batch_stride},
                                             {"B's batch stride", p.b.batch_stride},
                                             {"D's batch stride", p.d.batch_stride},
                                             {"C's batch stride", p.has_c ? p.c.batch_stride : 0}},
                                            vector);
      !reason.empty())
    return reason;
  if (p.batch > 1 && (p.a.batch_stride == 0 || p.b.batch_stride == 0 || p.d.batch_stride == 0 ||
                      (p.has_c && p.c.batch_stride == 0)))
    return "an operand is shared across the batch and the batch does not fold into M";
  constexpr std::int64_t kIntMax = 2147483647;
  if (p.m > kIntMax || p.n > kIntMax || p.k > kIntMax || p.batch > kIntMax)
    return "a dimension exceeds 2^31 - 1";
  return "";
}

GemmProblem skinny_problem(const GemmProblem& problem) {
  const GemmProblem folded = fold_batch_into_m(problem);
  return folded.m <= kSkinnyMaxRows ? folded : problem;
}

bool skinny_on_tensor_cores(const GemmProblem& folded, const DeviceInfo& device) {
  return dtype_size(folded.dtype) == 2 && folded.m >= 2 && device.compute_capability() >= 80;
}

std::string skinny_layout_problem(const GemmProblem& problem, const DeviceInfo& device) {
  const GemmProblem p = skinny_problem(problem);
  const std::int64_t vector = 16 / static_cast<std::int64_t>(dtype_size(p.dtype));
  if (p.m > kSkinnyMaxRows)
    return fmt::format("M = {} is more rows than it takes ({})", p.m, kSkinnyMaxRows);
  if (p.m > kSkinnyCudaCoreMaxRows && !skinny_on_tensor_cores(p, device))
    return fmt::format(
        "M = {} is more rows than its CUDA-core form takes ({}); its tensor-core form (up to {}) "
        "takes 16-bit data on compute capability 8.0 or later, not {} on {}.{}",
        p.m, kSkinnyCudaCoreMaxRows, kSkinnyMaxRows, dtype_name(p.dtype), device.cc_major,
        device.cc_minor);
  if (std::string reason = k_contiguous_problem(p); !reason.empty()) return reason;
  if (p.k % vector != 0) return fmt::format("K = {} is not a multiple of {}", p.k, vector);
  const MatrixView a = p.op_a(), b = p.op_b();
  if (std::string reason = unaligned_stride({{"A's row stride", a.row_stride},
                                             {"B's row stride", b.col_stride},
                                             {"A's batch stride", a.batch_stride},
                                             {"B's batch stride", b.batch_stride}},
                                            vector);
      !reason.empty())
    return reason;
  return skinny_grid_problem(p, device);
}

std::string skinny_fp8w_layout_problem(const GemmProblem& problem, const DeviceInfo& device) {
  if (!problem.b_constant) return "B is not a constant (its e4m3 copy is made once, at compile)";
  const GemmProblem p = fold_batch_into_m(problem);
  if (p.m > kSkinnyMaxRows)
    return fmt::format("M = {} is more rows than it takes ({})", p.m, kSkinnyMaxRows);
  // B is read from its dense [N, K] e4m3 copy, whatever its own layout.
  const MatrixView a = p.op_a();
  if (a.col_stride != 1 && a.cols != 1) return "op(A) is not row-major (K is not contiguous)";
  const std::int64_t vector = 16 / static_cast<std::int64_t>(dtype_size(p.dtype));
  if (std::string reason = unaligned_stride({{"A's row stride", a.row_stride}}, vector);
      !reason.empty())
    return reason;
  if (p.b_scale_block_k > 0 &&
      !skinny_fp8_scale_blocks_fit(p.b_scale_block_n, p.b_scale_block_k, p.n))
    return fmt::format(
        "the weight's scales are per {}x{} block of op(B)^T; it takes blocks of {} times a power "
        "of two along K and a multiple of {} along N",
        p.b_scale_block_n, p.b_scale_block_k, kSkinnyFp8StepK, kSkinnyTileColumns);
  return skinny_grid_problem(p, device);
}

std::int64_t layout_alignment_bytes(const GemmProblem& p) {
  const auto element = static_cast<std::int64_t>(dtype_size(p.dtype));
  std::int64_t alignment = 16;
  auto narrow_to = [&](std::int64_t elements) {
    while (alignment > element && (elements * element) % alignment != 0) alignment /= 2;
  };
  for (const MatrixView* v : {&p.a, &p.b, &p.d, p.has_c ? &p.c : nullptr}) {
    if (v == nullptr) continue;
    narrow_to(v->col_stride == 1 ? v->row_stride : v->col_stride);
    narrow_to(v->batch_stride);
  }
  return alignment;
}

bool is_tensor_core_aligned(const GemmProblem& p) { return layout_alignment_bytes(p) == 16; }

namespace {

// KernelInfo::pass_act_*_untuned: the problem's activation has no cuBLASLt epilogue
// (LtEpilogue::kNone; Activation::None maps to kIdentity), and its rows and B are
// within the kernel's measured rule; for cuda_skinny, on its tensor-core form.
// `folded`: fold_batch_into_m(problem), which the caller has made once.
bool pass_act_rule_holds(const KernelInfo& info, const GemmProblem& problem,
                         const GemmProblem& folded, const DeviceInfo& device) {
  if (activation_info(problem.act).cublaslt != LtEpilogue::kNone) return false;
  if (info.pass_act_min_rows_untuned <= 0 || folded.m < info.pass_act_min_rows_untuned)
    return false;
  if (info.pass_act_max_rows_untuned > 0 && folded.m > info.pass_act_max_rows_untuned) return false;
  if (info.pass_act_max_b_elements_untuned > 0 &&
      folded.n * folded.k > info.pass_act_max_b_elements_untuned)
    return false;
  if (info.pass_act_max_k_untuned > 0 && folded.k > info.pass_act_max_k_untuned) return false;
  return info.family != KernelFamily::CudaSkinny ||
         skinny_on_tensor_cores(skinny_problem(problem), device);
}

// The rows the rule above takes, and its bounds on B and K, as the plan's reasons say them.
std::string pass_act_rows_text(const KernelInfo& info) {
  return info.pass_act_max_rows_untuned > 0
             ? fmt::format("{} to {}", info.pass_act_min_rows_untuned,
                           info.pass_act_max_rows_untuned)
             : fmt::format("{} or more", info.pass_act_min_rows_untuned);
}
std::string pass_act_bounds_text(const KernelInfo& info) {
  std::string text;
  if (info.pass_act_max_b_elements_untuned > 0)
    text += fmt::format(" and B of at most {} elements", info.pass_act_max_b_elements_untuned);
  if (info.pass_act_max_k_untuned > 0)
    text += fmt::format(" and K of at most {}", info.pass_act_max_k_untuned);
  return text;
}

}  // namespace

Selection select_gemm_kernel(const GemmProblem& problem, const DeviceInfo& device,
                             const SelectionPolicy& policy, const MeasuredTime& measured,
                             std::span<const KernelId> offered) {
  Selection selection;
  const bool aligned = is_tensor_core_aligned(problem);
  const std::string layout_problem = cublaslt_layout_problem(problem);
  const std::string cutlass_problem = cutlass_layout_problem(problem);
  const GemmProblem folded = fold_batch_into_m(problem);
  const std::int64_t rows = folded.m;
  for (KernelId kernel : offered) {
    Candidate candidate;
    candidate.kernel = kernel;
    std::string reason = device_rule(kernel_info(kernel), device);
    if (reason.empty()) reason = dtype_rule(kernel_info(kernel), problem, policy);
    if (reason.empty() && is_cublaslt_kernel(kernel) && !layout_problem.empty())
      reason = layout_problem;
    if (reason.empty() && is_cutlass_kernel(kernel) && !cutlass_problem.empty())
      reason = cutlass_problem;
    if (reason.empty() && kernel_info(kernel).family == KernelFamily::CudaSkinny)
      reason = skinny_layout_problem(problem, device);
    if (reason.empty() && kernel_info(kernel).family == KernelFamily::CudaSkinnyFp8)
      reason = skinny_fp8w_layout_problem(problem, device);
    if (reason.empty() && is_fp8_kernel(kernel)) reason = fp8_layout_problem(problem);
    if (!reason.empty()) {
      candidate.reason = reason;
      selection.candidates.push_back(candidate);
      continue;
    }
    candidate.feasible = true;
    candidate.estimated_us = estimate_us(kernel, problem, device, aligned, candidate.reason);
    const bool sixteen_bit = kernel == KernelId::LtF16 || kernel == KernelId::LtBf16;
    if (sixteen_bit && !aligned && policy.allow_staging) {
      // Staging pays when one extra pass over the operands costs less than the
      // unaligned kernels lose: compare the two estimates.
      std::string basis;
      const double staged = estimate_us(kernel, staged_problem(problem), device, true, basis) +
                            3 * 3.0 + staging_bytes(problem) / (bandwidth_gbs(device) * 1e3 * 0.6);
      if (staged < candidate.estimated_us * kStagingRequiredGain) {
        candidate.estimated_us = staged;
        candidate.staged = true;
        candidate.reason = basis + fmt::format(", staged into aligned buffers ({:.1f} MB copied)",
                                               staging_bytes(problem) / 1e6);
      } else {
        candidate.reason += ", staging would not pay";
      }
    }
    candidate.model_us = candidate.estimated_us;
    if (measured) {
      if (auto time = measured(kernel, problem)) {
        candidate.estimated_us = *time;
        candidate.measured = true;
        candidate.reason = "measured by the tuner";
      }
    }
    const bool gated_in_epilogue = problem.gated && gated_epilogue_problem(problem, kernel).empty();
    if (problem.gated && !gated_in_epilogue) {
      // The tuner times the GEMM alone: the gated_mul pass after it reads the
      // 2I-wide result and writes half of it.
      const double pass = gated_pass_us(problem, device);
      candidate.estimated_us += pass;
      candidate.model_us += pass;
      candidate.reason += fmt::format(", + separate gated_mul pass ({:.1f} us)", pass);
    }
    const KernelInfo& info = kernel_info(kernel);
    const bool gated_rule =
        gated_in_epilogue && info.gated_min_rows_untuned > 0 && rows >= info.gated_min_rows_untuned;
    const bool pass_act_rule = !problem.gated && pass_act_rule_holds(info, problem, folded, device);
    candidate.preferred_untuned = gated_rule || pass_act_rule;
    if (gated_rule)
      candidate.reason += fmt::format(
          "; a gated unit of {} rows (>= {}): preferred untuned, the fused step measured faster "
          "than cuBLASLt and its gated_mul pass",
          rows, info.gated_min_rows_untuned);
    if (pass_act_rule)
      candidate.reason += fmt::format(
          "; {} rows ({}{}) with {}, which no cuBLASLt epilogue computes: preferred untuned, "
          "measured faster than cuBLASLt and its separate pass",
          rows, pass_act_rows_text(info), pass_act_bounds_text(info), activation_name(problem.act));
    candidate.needs_measurement =
        !candidate.preferred_untuned &&
        (info.needs_measurement || (info.max_rows_untuned > 0 && rows > info.max_rows_untuned));
    if (candidate.needs_measurement && !candidate.measured)
      candidate.reason +=
          info.needs_measurement
              ? "; not chosen without a measured time (forced or tuned only)"
              : fmt::format("; more than {} row(s): not chosen without a measured time",
                            info.max_rows_untuned);
    selection.candidates.push_back(candidate);
  }

  choose_kernel(selection, problem, policy, aligned);
  return selection;
}

void choose_kernel(Selection& selection, const GemmProblem& problem, const SelectionPolicy& policy,
                   bool aligned) {
  if (policy.forced) {
    const auto forced =
        std::find_if(selection.candidates.begin(), selection.candidates.end(),
                     [&](const Candidate& c) { return c.kernel == *policy.forced; });
    if (forced == selection.candidates.end()) {
      std::string offered;
      for (const Candidate& c : selection.candidates)
        offered += fmt::format("{}{}", offered.empty() ? "" : ", ", kernel_name(c.kernel));
      fail(GE2_ERROR_UNSUPPORTED,
           "kernel '{}' was forced but this context's backend does not offer it (it offers {})",
           kernel_name(*policy.forced), offered);
    }
    require(forced->feasible, GE2_ERROR_UNSUPPORTED,
            "kernel '{}' was forced but cannot run GEMM {} ({}): {}", kernel_name(*policy.forced),
            problem, dtype_name(problem.dtype), forced->reason);
    selection.kernel = *policy.forced;
    selection.staged = forced->staged && !forced->measured;
    selection.why = "forced by force_kernel / GE2_FORCE_KERNEL";
    return;
  }

  // Measured times outrank model estimates: compare among measured candidates
  // when any exist, else among estimates.
  const bool any_measured =
      std::any_of(selection.candidates.begin(), selection.candidates.end(),
                  [](const Candidate& c) { return c.feasible && c.measured; });
  // Untuned, a preferred candidate (a rule from measurement) outranks the estimates.
  const auto ranks_before = [&](const Candidate& a, const Candidate& b) {
    if (!any_measured && a.preferred_untuned != b.preferred_untuned) return a.preferred_untuned;
    return a.estimated_us < b.estimated_us;
  };
  const Candidate* best = nullptr;
  for (const auto& candidate : selection.candidates) {
    if (!candidate.feasible || is_fp8_kernel(candidate.kernel)) continue;
    if (any_measured && !candidate.measured) continue;
    if (candidate.needs_measurement && !candidate.measured) continue;
    if (best == nullptr || ranks_before(candidate, *best)) best = &candidate;
  }
  // An FP8 row (feasible only under allow_fp8, or the weight-only row on a weight
  // given in e4m3) replaces that choice where the
  // model rates it faster, both rated by the model: the tuner does not time FP8
  // rows, and their accuracy is judged by the compile-time gate, not here.
  const Candidate* fp8 = nullptr;
  // Ties (memory-bound sizes) go to the later row: fast accumulation.
  for (const auto& candidate : selection.candidates)
    if (candidate.feasible && is_fp8_kernel(candidate.kernel) &&
        (fp8 == nullptr || candidate.model_us <= fp8->model_us))
      fp8 = &candidate;
  if (fp8 != nullptr && (best == nullptr || fp8->model_us < best->model_us)) {
    selection.kernel = fp8->kernel;
    selection.staged = false;
    const char* why_fp8 = policy.allow_fp8 ? "allow_fp8" : "weight given in e4m3";
    selection.why =
        best == nullptr
            ? fmt::format("{}: the only kernel left ({:.2f} us estimated)", why_fp8, fp8->model_us)
            : fmt::format("{}: estimated {:.2f} us against {:.2f} us for {}", why_fp8,
                          fp8->model_us, best->model_us, kernel_name(best->kernel));
    return;
  }
  require(best != nullptr, GE2_ERROR_UNSUPPORTED, "no kernel can run GEMM {} ({})", problem,
          dtype_name(problem.dtype));
  selection.kernel = best->kernel;
  selection.staged = best->staged && !best->measured;
  selection.why =
      !any_measured && best->preferred_untuned && problem.gated
          ? fmt::format("a gated unit of {} rows or more runs fused untuned ({:.2f} us estimated)",
                        kernel_info(best->kernel).gated_min_rows_untuned, best->estimated_us)
      : !any_measured && best->preferred_untuned
          ? fmt::format("{} rows with {}{} run with it fused untuned ({:.2f} us estimated)",
                        pass_act_rows_text(kernel_info(best->kernel)), activation_name(problem.act),
                        pass_act_bounds_text(kernel_info(best->kernel)), best->estimated_us)
          : fmt::format("lowest {} time ({:.2f} us)", any_measured ? "measured" : "estimated",
                        best->estimated_us);
  selection.why += aligned            ? ""
                   : selection.staged ? "; unaligned leading dimensions: operands staged"
                                      : "; leading dimensions not 16-byte aligned";
  if (fp8 != nullptr)
    selection.why +=
        fmt::format("; {} estimated slower ({:.2f} us)", kernel_name(fp8->kernel), fp8->model_us);
}

void refuse_and_reselect(Selection& selection, const GemmProblem& problem,
                         const SelectionPolicy& policy, const std::string& refusal) {
  const KernelId refused = selection.kernel;
  for (Candidate& candidate : selection.candidates) {
    if (candidate.kernel != refused) continue;
    candidate.feasible = false;
    candidate.reason = fmt::format("the backend refused it: {}", refusal);
  }
  require(!policy.forced, GE2_ERROR_UNSUPPORTED,
          "kernel '{}' was forced but cannot run GEMM {} ({}): {}", kernel_name(refused), problem,
          dtype_name(problem.dtype), refusal);
  choose_kernel(selection, problem, policy, is_tensor_core_aligned(problem));
  selection.why += fmt::format(" ({} refused by the backend)", kernel_name(refused));
}

}  // namespace ge2
