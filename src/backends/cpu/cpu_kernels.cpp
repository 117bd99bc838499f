#include "backends/cpu/cpu_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#ifdef __linux__
#include <sched.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/activation.hpp"
#include "core/error.hpp"
#include "select/selector.hpp"

namespace ge2::cpu {
namespace {

using Loader = float (*)(const void*, std::int64_t);

// f(std::integral_constant<Loader, load>{}) with `dtype`'s element loader as a
// compile-time constant, so the loops that read elements inline it.
template <typename F>
void with_loader(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F16:
      return f(std::integral_constant<Loader, detail::load_f16>{});
    case DType::BF16:
      return f(std::integral_constant<Loader, detail::load_bf16>{});
    case DType::F32:
      return f(std::integral_constant<Loader, detail::load_f32>{});
    case DType::F8E4M3:  // storage only: no value is computed in it
      break;
  }
  fail(GE2_ERROR_INTERNAL, "cpu kernels: dtype {} has no loader", static_cast<int>(dtype));
}

// Copies op(matrix) of one batch into a dense row-major float buffer [rows x cols],
// in square tiles so a transposed read (nn.Linear's weights) stays within cache.
template <Loader Load>
void pack_as(const MatrixView& v, bool transposed, const void* base, std::int64_t batch_index,
             std::vector<float>& out) {
  constexpr std::int64_t kTile = 64;
  const std::int64_t rows = transposed ? v.cols : v.rows;
  const std::int64_t cols = transposed ? v.rows : v.cols;
  out.resize(static_cast<std::size_t>(rows * cols));
  const std::int64_t origin = batch_index * v.batch_stride;
  // Element (i, j) of op(matrix) is stored at (j, i) when transposed.
  const std::int64_t step_i = transposed ? v.col_stride : v.row_stride;
  const std::int64_t step_j = transposed ? v.row_stride : v.col_stride;
  for (std::int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (std::int64_t j0 = 0; j0 < cols; j0 += kTile)
      for (std::int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
        for (std::int64_t j = j0; j < std::min(cols, j0 + kTile); ++j)
          out[static_cast<std::size_t>(i * cols + j)] =
              Load(base, origin + i * step_i + j * step_j);
}

void pack(const MatrixView& v, bool transposed, DType dtype, const void* base,
          std::int64_t batch_index, std::vector<float>& out) {
  // Loops in a lambda here ran 40% slower than in their own function template.
  with_loader(dtype, [&](auto loader) {
    pack_as<decltype(loader)::value>(v, transposed, base, batch_index, out);
  });
}

// Rounds a rows x cols row-major matrix to e4m3, each block of block_rows x
// block_cols through its own scale (the device's fp8_quantize.cu arithmetic):
// x * 448 / amax, saturating. Returns the scales amax / 448, row-major by block
// row, or with `multiply_back` leaves each element times its block's scale (the
// value the GEMM reads) and returns nothing. A NaN makes its block's amax, and so
// its scale, NaN. Rows are blocks of (1, cols), output channels of op(B) (rows, 1).
std::vector<float> round_to_e4m3(std::vector<float>& values, std::int64_t rows, std::int64_t cols,
                                 std::int64_t block_rows, std::int64_t block_cols,
                                 bool multiply_back = false) {
  const std::int64_t grid_rows = (rows + block_rows - 1) / block_rows;
  const std::int64_t grid_cols = (cols + block_cols - 1) / block_cols;
  std::vector<float> scales(static_cast<std::size_t>(grid_rows * grid_cols));
  for (std::int64_t bi = 0; bi < grid_rows; ++bi)
    for (std::int64_t bj = 0; bj < grid_cols; ++bj) {
      const std::int64_t i_end = std::min(rows, (bi + 1) * block_rows);
      const std::int64_t j_end = std::min(cols, (bj + 1) * block_cols);
      float amax = 0.0f;
      for (std::int64_t i = bi * block_rows; i < i_end; ++i)
        for (std::int64_t j = bj * block_cols; j < j_end && !std::isnan(amax); ++j) {
          const float magnitude = std::fabs(values[static_cast<std::size_t>(i * cols + j)]);
          if (std::isnan(magnitude) || magnitude > amax) amax = magnitude;
        }
      const float multiplier = e4m3_multiplier(amax), scale = e4m3_scale(amax);
      for (std::int64_t i = bi * block_rows; i < i_end; ++i)
        for (std::int64_t j = bj * block_cols; j < j_end; ++j) {
          float& value = values[static_cast<std::size_t>(i * cols + j)];
          value = e4m3_bits_to_float(float_to_e4m3_bits(value * multiplier));
          if (multiply_back) value *= scale;
        }
      scales[static_cast<std::size_t>(bi * grid_cols + bj)] = scale;
    }
  if (multiply_back) return {};
  return scales;
}

// row[j] = act(row[j]) for j < n. The activation formulas use fmaf, which the
// x86-64 baseline lacks: there each fmaf is a libm call, and a GELU cost about
// 20 ns. Compiled again for AVX2 with FMA and chosen at run time as multiply_rows
// is; fmaf is exactly rounded either way, so both give the same bits.
[[gnu::always_inline]] inline void activate_row_body(Activation act, float* row, std::int64_t n) {
  visit_activation(act, [&](auto f) {
    for (std::int64_t j = 0; j < n; ++j) row[j] = f(row[j]);
  });
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void activate_row_fma(Activation act, float* row,
                                                          std::int64_t n) {
  activate_row_body(act, row, n);
}
#endif

void activate_row(Activation act, float* row, std::int64_t n) {
  if (act == Activation::None) return;
#if defined(__x86_64__) && defined(__GNUC__)
  // Both: the version is compiled for AVX2 too, and some CPUs have FMA without it.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return activate_row_fma(act, row, n);
#endif
  activate_row_body(act, row, n);
}

// out[batch, i, :] = act(gate) * up for the row's values [gate | up], the gate
// half activated in place (gated_product's value: act(gate), then the product).
void store_gated_row(const GatedOutput& gated, float* row, std::int64_t batch, std::int64_t i,
                     DType dtype, void* out) {
  const MatrixView& o = gated.out;
  const std::int64_t half = o.cols;
  activate_row(gated.act, row, half);
  for (std::int64_t j = 0; j < half; ++j)
    store_from_float(out, dtype, batch * o.batch_stride + i * o.row_stride + j * o.col_stride,
                     gated_product(Identity{}, row[j], row[half + j]));
}

// Rows of A that share each pass over B (each B row loaded serves all of them)
// and columns per chunk: the block's accumulators, 8 x 512 floats, stay in L1.
constexpr std::int64_t kRowBlock = 8;
constexpr std::int64_t kColChunk = 512;
// Below this many multiply-adds per batch a GEMM runs on the calling thread only:
// starting a thread costs tens of microseconds.
constexpr double kThreadedFrom = 4.0e6;
constexpr unsigned kDefaultMaxThreads = 16;

// A dense-row view of op(A) or op(B) in f32: the caller's memory where it already
// is f32 with unit column stride, else a packed copy.
struct RowMajor {
  const float* data = nullptr;
  std::int64_t row_stride = 0;
};

// acc[r, :] = the sum over k, in order from 0, of a[r, k] * b[k, :], for `rows`
// rows: every element is the same fp32 sum in the same order as with one row at
// a time and one thread, so results never depend on the blocking, the threads
// or the instruction set (below: AVX2 without FMA rounds each product before its
// sum, as the baseline does).
[[gnu::always_inline]] inline void multiply_rows_body(RowMajor a, RowMajor b, std::int64_t rows,
                                                      std::int64_t k, std::int64_t n, float* acc) {
  std::fill(acc, acc + rows * n, 0.0f);
  for (std::int64_t j0 = 0; j0 < n; j0 += kColChunk) {
    const std::int64_t width = std::min(kColChunk, n - j0);
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const float* __restrict b_row = b.data + kk * b.row_stride + j0;
      for (std::int64_t r = 0; r < rows; ++r) {
        const float a_rk = a.data[r * a.row_stride + kk];
        float* __restrict out = acc + r * n + j0;
        for (std::int64_t j = 0; j < width; ++j) out[j] += a_rk * b_row[j];
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same body compiled for AVX2 (8 float lanes), chosen at run time: no ifunc
// (target_clones), whose resolver runs during relocation, before a sanitizer's
// runtime is up.
__attribute__((target("avx2"))) void multiply_rows_avx2(RowMajor a, RowMajor b, std::int64_t rows,
                                                        std::int64_t k, std::int64_t n,
                                                        float* acc) {
  multiply_rows_body(a, b, rows, k, n, acc);
}
#endif

void multiply_rows(RowMajor a, RowMajor b, std::int64_t rows, std::int64_t k, std::int64_t n,
                   float* acc) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return multiply_rows_avx2(a, b, rows, k, n, acc);
#endif
  multiply_rows_body(a, b, rows, k, n, acc);
}

// Up to this many rows of A, a B stored [N, K] (nn.Linear's weight) is read in
// place, each output a dot product of two rows contiguous in k: converting and
// transposing all of B would cost more than the rows' arithmetic.
constexpr std::int64_t kInPlaceNkRows = 16;
// Output columns per block of that path: 8 rows of B in cache while A's rows pass.
constexpr std::int64_t kNkColumns = 8;

// acc[r, j0 .. j0 + width) for every row r of A, with op(B)[k, j] read where B
// stores it (element (j, k) at b_origin + j * b_per_j + k * b_per_k): each
// element the same fp32 sum, over k in order from 0, as multiply_rows computes.
// Kept out of line: inlined into run_blocks' lambda, whose captures are references,
// it ran about 10% slower.
template <Loader LoadB>
[[gnu::noinline]] void multiply_nk_columns(RowMajor a, const void* b, std::int64_t b_origin,
                                           std::int64_t b_per_j, std::int64_t b_per_k,
                                           std::int64_t rows, std::int64_t k, std::int64_t n,
                                           std::int64_t j0, std::int64_t width, float* acc) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float sums[kNkColumns] = {};
    const float* a_row = a.data + r * a.row_stride;
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const float a_rk = a_row[kk];
      for (std::int64_t jj = 0; jj < width; ++jj)
        sums[jj] += a_rk * LoadB(b, b_origin + (j0 + jj) * b_per_j + kk * b_per_k);
    }
    for (std::int64_t jj = 0; jj < width; ++jj) acc[r * n + j0 + jj] = sums[jj];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The 8 x 8 halves rows[c][0..7] transposed: out[i] holds rows[0..7][i].
__attribute__((target("avx2,f16c"))) inline void transpose_8x8_u16(const __m128i rows[8],
                                                                   __m128i out[8]) {
  __m128i pairs[8], quads[8];
  for (int c = 0; c < 8; c += 2) {
    pairs[c] = _mm_unpacklo_epi16(rows[c], rows[c + 1]);      // k0..3 of rows c, c+1
    pairs[c + 1] = _mm_unpackhi_epi16(rows[c], rows[c + 1]);  // k4..7
  }
  for (int h = 0; h < 2; ++h) {    // rows 0-3, then 4-7
    for (int q = 0; q < 2; ++q) {  // k0..3, then k4..7
      const __m128i low = pairs[4 * h + q], high = pairs[4 * h + 2 + q];
      quads[4 * h + 2 * q] = _mm_unpacklo_epi32(low, high);      // k 4q, 4q+1
      quads[4 * h + 2 * q + 1] = _mm_unpackhi_epi32(low, high);  // k 4q+2, 4q+3
    }
  }
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = _mm_unpacklo_epi64(quads[i], quads[4 + i]);
    out[2 * i + 1] = _mm_unpackhi_epi64(quads[i], quads[4 + i]);
  }
}

// sums[r] += a[r, kk] * b_k for every row r of A, the product rounded before the add.
__attribute__((target("avx2,f16c"))) inline void accumulate_k(RowMajor a, std::int64_t kk,
                                                              __m256 b_k, std::int64_t rows,
                                                              __m256* sums) {
  for (std::int64_t r = 0; r < rows; ++r)
    sums[r] =
        _mm256_add_ps(sums[r], _mm256_mul_ps(_mm256_set1_ps(a.data[r * a.row_stride + kk]), b_k));
}

// multiply_nk_columns for an f16 B read along k (b_per_k 1: nn.Linear's dense
// weight) with AVX2 and F16C: 8 k of the 8 columns are loaded as 8 vectors,
// transposed and converted by one instruction per k, and each k goes through the
// 8 columns' sums as one vector. Each lane is the same fp32 sum in k order, each
// product rounded before its add (no FMA is enabled here, so the compiler cannot
// contract them): the same bits as the template, which converted element by
// element at a fifth of the speed. (f32 gained nothing this way, measured: its
// one-token GEMM is bound by reading the weight. The one difference: vcvtph2ps
// quiets a signalling NaN, which stays a NaN.)
__attribute__((target("avx2,f16c"))) void multiply_nk_columns_f16c(
    RowMajor a, const std::uint16_t* b, std::int64_t b_origin, std::int64_t b_per_j,
    std::int64_t rows, std::int64_t k, std::int64_t n, std::int64_t j0, std::int64_t width,
    float* acc) {
  assert(rows <= kInPlaceNkRows && width <= kNkColumns);
  __m256 sums[kInPlaceNkRows];
  for (std::int64_t r = 0; r < rows; ++r) sums[r] = _mm256_setzero_ps();
  // Columns past `width` read column 0 again; their lanes are never stored.
  const std::uint16_t* column[kNkColumns];
  for (std::int64_t jj = 0; jj < kNkColumns; ++jj)
    column[jj] = b + b_origin + (j0 + (jj < width ? jj : 0)) * b_per_j;
  std::int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    __m128i loaded[8], at_k[8];
    for (int c = 0; c < 8; ++c)
      loaded[c] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(column[c] + kk));
    transpose_8x8_u16(loaded, at_k);
    for (int i = 0; i < 8; ++i) accumulate_k(a, kk + i, _mm256_cvtph_ps(at_k[i]), rows, sums);
  }
  for (; kk < k; ++kk) {
    const __m128i halves =
        _mm_setr_epi16(static_cast<short>(column[0][kk]), static_cast<short>(column[1][kk]),
                       static_cast<short>(column[2][kk]), static_cast<short>(column[3][kk]),
                       static_cast<short>(column[4][kk]), static_cast<short>(column[5][kk]),
                       static_cast<short>(column[6][kk]), static_cast<short>(column[7][kk]));
    accumulate_k(a, kk, _mm256_cvtph_ps(halves), rows, sums);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    alignas(32) float lanes[kNkColumns];
    _mm256_store_ps(lanes, sums[r]);
    for (std::int64_t jj = 0; jj < width; ++jj) acc[r * n + j0 + jj] = lanes[jj];
  }
}

// F16C from CPUID (leaf 1, ECX): clang's __builtin_cpu_supports does not know "f16c".
bool has_avx2_f16c() {
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0 &&
           __builtin_cpu_supports("avx2");
  }();
  return supported;
}
#endif

// The CPUs this process may run on (its affinity mask), at least 1.
unsigned usable_cpus() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

// Runs body(claim) on up to `threads` threads, the caller's among them; claim()
// hands out each block index in [0, blocks) once, then -1. A thread that cannot
// be started leaves its share to the others; the first exception a body throws
// is rethrown here once all have stopped.
template <typename Body>
void run_blocks(std::int64_t blocks, unsigned threads, const Body& body) {
  std::atomic<std::int64_t> next{0};
  auto claim = [&]() -> std::int64_t {
    const std::int64_t block = next++;
    return block < blocks ? block : -1;
  };
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&] {
    try {
      body(claim);
    } catch (...) {
      const std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = blocks;
    }
  };
  {
    std::vector<std::jthread> helpers;
    for (unsigned t = 1; t < threads; ++t) {
      try {
        helpers.emplace_back(worker);
      } catch (const std::system_error&) {
        break;
      }
    }
    worker();
  }  // joins the helpers
  if (failure) std::rethrow_exception(failure);
}

// op(v) of one batch as dense f32 rows: in place when it already is (no copy, no
// allocation: the common f32 case), else packed into `buffer`. Read in place while
// other rows' results are written: sound because an output never overlaps an
// input (plan bindings and one-shot calls refuse it).
RowMajor rows_of(const MatrixView& v, bool transposed, DType dtype, const void* base,
                 std::int64_t batch_index, bool must_copy, std::vector<float>& buffer) {
  if (!must_copy && dtype == DType::F32 && !transposed && v.col_stride == 1)
    return {static_cast<const float*>(base) + batch_index * v.batch_stride, v.row_stride};
  pack(v, transposed, dtype, base, batch_index, buffer);
  return {buffer.data(), transposed ? v.rows : v.cols};
}

// acc = op(A) op(B) for a few rows of A and op(B) transposed in memory, on up to
// `threads` threads over blocks of columns.
void multiply_rows_nk(RowMajor a, const GemmProblem& p, const void* b, std::int64_t batch,
                      unsigned threads, float* acc) {
  const std::int64_t b_origin = batch * p.b.batch_stride;
  // op(B)[k, j] = B[j, k]: j steps over B's rows, k over its columns.
  const std::int64_t b_per_j = p.b.row_stride, b_per_k = p.b.col_stride;
  // columns(j0, width) for every block of columns, on up to `threads` threads.
  auto over_column_blocks = [&](auto&& columns) {
    run_blocks((p.n + kNkColumns - 1) / kNkColumns, threads, [&](auto claim) {
      for (std::int64_t block = claim(); block >= 0; block = claim()) {
        const std::int64_t j0 = block * kNkColumns;
        columns(j0, std::min(kNkColumns, p.n - j0));
      }
    });
  };
#if defined(__x86_64__) && defined(__GNUC__)
  if (p.dtype == DType::F16 && b_per_k == 1 && has_avx2_f16c())
    return over_column_blocks([&](std::int64_t j0, std::int64_t width) {
      multiply_nk_columns_f16c(a, static_cast<const std::uint16_t*>(b), b_origin, b_per_j, p.m, p.k,
                               p.n, j0, width, acc);
    });
#endif
  with_loader(p.dtype, [&](auto loader) {
    over_column_blocks([&](std::int64_t j0, std::int64_t width) {
      multiply_nk_columns<decltype(loader)::value>(a, b, b_origin, b_per_j, b_per_k, p.m, p.k, p.n,
                                                   j0, width, acc);
    });
  });
}

// values[i] = act(values[i]) rounded to `dtype`: what a producer GEMM whose
// activation the plan deferred (GemmProblem::a_act) would have stored.
void activate_in_dtype(Activation act, DType dtype, std::vector<float>& values) {
  activate_row(act, values.data(), static_cast<std::int64_t>(values.size()));
  for (float& value : values) {
    std::uint32_t stored = 0;
    store_from_float(&stored, dtype, 0, value);
    value = load_as_float(&stored, dtype, 0);
  }
}

void gemm_impl(const GemmProblem& p, const void* a, const void* b, const void* c, const void* bias,
               void* d, bool fp8, unsigned max_threads) {
  // Only the FP8 rows take a deferred activation (they copy op(A) anyway).
  require(fp8 || p.a_act == Activation::None, GE2_ERROR_INTERNAL,
          "cpu_ref: a deferred activation of A reached a kernel that does not apply it");
  std::vector<float> packed_a, packed_b;
  const double work = static_cast<double>(p.m) * static_cast<double>(p.n) * p.k;
  const bool b_in_place_nk = !fp8 && p.trans_b && p.m <= kInPlaceNkRows;
  // Blocks of rows, or of columns where B is read in place.
  const std::int64_t blocks =
      b_in_place_nk ? (p.n + kNkColumns - 1) / kNkColumns : (p.m + kRowBlock - 1) / kRowBlock;
  const unsigned threads =
      work < kThreadedFrom
          ? 1u
          : static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, std::max(1u, max_threads)));
  for (std::int64_t batch = 0; batch < p.batch; ++batch) {
    // FP8 rounds the operands in place: always a copy.
    const RowMajor a_rows = rows_of(p.a, p.trans_a, p.dtype, a, batch, fp8, packed_a);
    const RowMajor b_rows =
        b_in_place_nk ? RowMajor{} : rows_of(p.b, p.trans_b, p.dtype, b, batch, fp8, packed_b);
    if (p.a_act != Activation::None) activate_in_dtype(p.a_act, p.dtype, packed_a);
    // FP8: op(A) [M, K] per row, op(B) [K, N] per output column. On a block-scaled
    // weight (lt_fp8_e4m3's block mode) op(A) per row and 128 k, op(B) per block
    // of op(B)^T, each element multiplied back by its scale (scales varying along K
    // cannot wait for the sum).
    const bool scale_blocks = fp8 && fp8_block_scaled(p);
    const std::vector<float> a_scales =
        fp8 ? round_to_e4m3(packed_a, p.m, p.k, 1, scale_blocks ? kFp8ScaleBlock : p.k,
                            scale_blocks)
            : std::vector<float>{};
    const std::vector<float> b_scales =
        fp8 ? round_to_e4m3(packed_b, p.k, p.n, scale_blocks ? p.b_scale_block_k : p.k,
                            scale_blocks ? p.b_scale_block_n : 1, scale_blocks)
            : std::vector<float>{};
    const bool row_scales = fp8 && !scale_blocks;
    auto finish_row = [&](std::int64_t i, float* row) {
      for (std::int64_t j = 0; j < p.n; ++j) {
        float& value = row[j];
        value *= row_scales ? p.alpha * (a_scales[static_cast<std::size_t>(i)] *
                                         b_scales[static_cast<std::size_t>(j)])
                            : p.alpha;
        if (p.has_c)
          value += p.beta * load_as_float(
                                c, p.dtype,
                                batch * p.c.batch_stride + i * p.c.row_stride + j * p.c.col_stride);
        if (p.has_bias) value += load_as_float(bias, p.dtype, j * p.bias_stride);
      }
      if (p.gated) return store_gated_row(*p.gated, row, batch, i, p.dtype, d);
      activate_row(p.act, row, p.n);
      for (std::int64_t j = 0; j < p.n; ++j)
        store_from_float(
            d, p.dtype, batch * p.d.batch_stride + i * p.d.row_stride + j * p.d.col_stride, row[j]);
    };
    if (b_in_place_nk) {
      std::vector<float> acc(static_cast<std::size_t>(p.m * p.n));
      multiply_rows_nk(a_rows, p, b, batch, threads, acc.data());
      for (std::int64_t i = 0; i < p.m; ++i) finish_row(i, acc.data() + i * p.n);
      continue;
    }
    run_blocks(blocks, threads, [&](auto claim) {
      std::vector<float> acc(static_cast<std::size_t>(kRowBlock * p.n));
      for (std::int64_t block = claim(); block >= 0; block = claim()) {
        const std::int64_t first = block * kRowBlock;
        const std::int64_t rows = std::min(kRowBlock, p.m - first);
        multiply_rows({a_rows.data + first * a_rows.row_stride, a_rows.row_stride}, b_rows, rows,
                      p.k, p.n, acc.data());
        for (std::int64_t r = 0; r < rows; ++r) finish_row(first + r, acc.data() + r * p.n);
      }
    });
  }
}

}  // namespace

unsigned default_gemm_threads() { return std::min(usable_cpus(), kDefaultMaxThreads); }

void gemm(const GemmProblem& p, const void* a, const void* b, const void* c, const void* bias,
          void* d, unsigned threads) {
  gemm_impl(p, a, b, c, bias, d, false, threads);
}

void gemm_fp8(const GemmProblem& p, const void* a, const void* b, const void* c, const void* bias,
              void* d, unsigned threads) {
  // A batch that folds into M is one matrix, as on the device.
  const GemmProblem folded = fold_batch_into_m(p);
  require(folded.batch == 1, GE2_ERROR_UNSUPPORTED, "cpu_fp8_ref: {}", fp8_layout_problem(p));
  const std::string block_mode = fp8_block_mode_problem(folded);
  require(block_mode.empty(), GE2_ERROR_UNSUPPORTED, "cpu_fp8_ref: {}", block_mode);
  gemm_impl(folded, a, b, c, bias, d, true, threads);
}

void elementwise(const ElementwiseProblem& p, const void* x, const void* bias, const void* y,
                 void* out) {
  const MatrixView xv = matrix_view(p.x), ov = matrix_view(p.out);
  const MatrixView yv = p.combine == Combine::None ? MatrixView{} : matrix_view(p.y);
  for (std::int64_t batch = 0; batch < xv.batch; ++batch) {
    for (std::int64_t i = 0; i < xv.rows; ++i) {
      for (std::int64_t j = 0; j < xv.cols; ++j) {
        float value = load_as_float(
            x, p.x.dtype, batch * xv.batch_stride + i * xv.row_stride + j * xv.col_stride);
        if (p.combine != Combine::None) {
          value = apply_activation(p.x_act, value);
          const float other = load_as_float(
              y, p.y.dtype, batch * yv.batch_stride + i * yv.row_stride + j * yv.col_stride);
          value = p.combine == Combine::Add ? value + other : value * other;
        }
        if (p.has_bias) value += load_as_float(bias, p.x.dtype, j * p.bias_stride);
        store_from_float(out, p.out.dtype,
                         batch * ov.batch_stride + i * ov.row_stride + j * ov.col_stride,
                         apply_activation(p.act, value));
      }
    }
  }
}

}  // namespace ge2::cpu
