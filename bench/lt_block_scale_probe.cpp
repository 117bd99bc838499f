// lt_block_scale_probe: what cuBLASLt 13.1's block-scaled e4m3 GEMM on Hopper
// (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F for the activations,
// BLK128x128_32F for the weight: DeepSeek-V3's recipe) takes, before ge2 builds
// an FP8 row on it. For an nn.Linear layer (x [M, K] times W [N, K] transposed)
// in the TN layout lt_fp8_e4m3 runs, on e4m3 codes and scales drawn at random:
//
//   layouts  which memory order of each operand's scales reproduces the fp64
//            product (x's scales: one per row and 128 columns; W's: one per
//            128 x 128 block), M, K and N ending inside a block and not, so the
//            leading dimensions' padding shows;
//   epilogues which epilogues (bias, ReLU, tanh GELU) and a C with beta the
//            heuristic offers with these scale modes, and whether they compute
//            the right thing; f16 and bf16 D;
//   timing   the block-scaled GEMM against the outer-vector (row-wise) e4m3
//            GEMM lt_fp8_e4m3 runs and the 16-bit GEMM, on the same device and
//            shapes, interleaved, median of 15 rounds of 20 calls.
//
// Built on request: cmake --build build --target lt_block_scale_probe.
//   lt_block_scale_probe [layouts|epilogues|timing]...
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace {

#define PROBE_CUDA(call)                                                                        \
  do {                                                                                          \
    const cudaError_t status_ = (call);                                                         \
    if (status_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(status_), __FILE__, __LINE__); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

using ge2::bf16_bits_to_float;
using ge2::e4m3_bits_to_float;
using ge2::float_to_bf16_bits;
using ge2::float_to_e4m3_bits;
using ge2::float_to_half_bits;
using ge2::half_bits_to_float;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

struct DeviceMemory {
  void* p = nullptr;
  explicit DeviceMemory(std::size_t bytes) {
    PROBE_CUDA(cudaMalloc(&p, std::max<std::size_t>(bytes, 256)));
  }
  ~DeviceMemory() { cudaFree(p); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

template <typename T>
void upload(DeviceMemory& d, const std::vector<T>& h) {
  PROBE_CUDA(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// Scale layouts under test. x's scales: element (m, kb). W's: block (nb, kb).
enum class ALayout { OuterMajorLdM, OuterMajorLdM4, InnerMajor };
enum class WLayout { RowLdKb, RowLdKb4, ColLdNb, ColLdNb4 };
const char* name(ALayout l) {
  switch (l) {
    case ALayout::OuterMajorLdM:
      return "x scales (m, kb) at kb*M + m";
    case ALayout::OuterMajorLdM4:
      return "x scales (m, kb) at kb*round_up(M,4) + m";
    case ALayout::InnerMajor:
      return "x scales (m, kb) at m*KB + kb";
  }
  return "?";
}
const char* name(WLayout l) {
  switch (l) {
    case WLayout::RowLdKb:
      return "W scales (nb, kb) at nb*KB + kb";
    case WLayout::RowLdKb4:
      return "W scales (nb, kb) at nb*round_up(KB,4) + kb";
    case WLayout::ColLdNb:
      return "W scales (nb, kb) at kb*NB + nb";
    case WLayout::ColLdNb4:
      return "W scales (nb, kb) at kb*round_up(NB,4) + nb";
  }
  return "?";
}

struct Layer {
  std::int64_t m, n, k;
  std::vector<std::uint8_t> x, w;         // e4m3 codes, [M, K] and [N, K]
  std::vector<float> x_scales, w_scales;  // (m, kb) and (nb, kb), row-major
  std::vector<float> bias;                // N
  std::vector<float> c;                   // [M, N]
  std::int64_t kb() const { return ceil_div(k, 128); }
  std::int64_t nb() const { return ceil_div(n, 128); }
};

Layer make_layer(std::int64_t m, std::int64_t n, std::int64_t k, bool uniform_x, bool uniform_w,
                 unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 60.0f);
  std::uniform_real_distribution<float> scale(0.25f, 4.0f);
  Layer l{m, n, k, {}, {}, {}, {}, {}, {}};
  l.x.resize(static_cast<std::size_t>(m * k));
  l.w.resize(static_cast<std::size_t>(n * k));
  for (auto& v : l.x) v = float_to_e4m3_bits(normal(rng));
  for (auto& v : l.w) v = float_to_e4m3_bits(normal(rng));
  l.x_scales.resize(static_cast<std::size_t>(m * l.kb()));
  l.w_scales.resize(static_cast<std::size_t>(l.nb() * l.kb()));
  for (auto& v : l.x_scales) v = uniform_x ? 0.5f : scale(rng) / 1000.0f;
  for (auto& v : l.w_scales) v = uniform_w ? 0.5f : scale(rng) / 1000.0f;
  l.bias.resize(static_cast<std::size_t>(n));
  for (auto& v : l.bias) v = normal(rng) / 60.0f;
  l.c.resize(static_cast<std::size_t>(m * n));
  for (auto& v : l.c) v = normal(rng) / 60.0f;
  return l;
}

std::vector<float> x_scale_buffer(const Layer& l, ALayout layout) {
  const std::int64_t ld = layout == ALayout::OuterMajorLdM4 ? round_up(l.m, 4) : l.m;
  std::vector<float> out(static_cast<std::size_t>(round_up(l.m, 4) * round_up(l.kb(), 4)), 1.0f);
  for (std::int64_t m = 0; m < l.m; ++m)
    for (std::int64_t kb = 0; kb < l.kb(); ++kb) {
      const float s = l.x_scales[static_cast<std::size_t>(m * l.kb() + kb)];
      const std::int64_t at = layout == ALayout::InnerMajor ? m * l.kb() + kb : kb * ld + m;
      out[static_cast<std::size_t>(at)] = s;
    }
  return out;
}

std::vector<float> w_scale_buffer(const Layer& l, WLayout layout) {
  std::vector<float> out(static_cast<std::size_t>(round_up(l.nb(), 4) * round_up(l.kb(), 4)), 1.0f);
  for (std::int64_t nb = 0; nb < l.nb(); ++nb)
    for (std::int64_t kb = 0; kb < l.kb(); ++kb) {
      std::int64_t at = 0;
      switch (layout) {
        case WLayout::RowLdKb:
          at = nb * l.kb() + kb;
          break;
        case WLayout::RowLdKb4:
          at = nb * round_up(l.kb(), 4) + kb;
          break;
        case WLayout::ColLdNb:
          at = kb * l.nb() + nb;
          break;
        case WLayout::ColLdNb4:
          at = kb * round_up(l.nb(), 4) + nb;
          break;
      }
      out[static_cast<std::size_t>(at)] = l.w_scales[static_cast<std::size_t>(nb * l.kb() + kb)];
    }
  return out;
}

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

std::vector<double> reference(const Layer& l, cublasLtEpilogue_t epilogue, bool with_c) {
  std::vector<double> d(static_cast<std::size_t>(l.m * l.n));
  for (std::int64_t i = 0; i < l.m; ++i)
    for (std::int64_t j = 0; j < l.n; ++j) {
      double sum = 0;
      for (std::int64_t kk = 0; kk < l.k; ++kk) {
        const double xs = l.x_scales[static_cast<std::size_t>(i * l.kb() + kk / 128)];
        const double ws = l.w_scales[static_cast<std::size_t>((j / 128) * l.kb() + kk / 128)];
        sum += xs * e4m3_bits_to_float(l.x[static_cast<std::size_t>(i * l.k + kk)]) * ws *
               e4m3_bits_to_float(l.w[static_cast<std::size_t>(j * l.k + kk)]);
      }
      if (with_c) sum += l.c[static_cast<std::size_t>(i * l.n + j)];
      const bool bias = epilogue == CUBLASLT_EPILOGUE_BIAS ||
                        epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
                        epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
      if (bias) sum += l.bias[static_cast<std::size_t>(j)];
      if (epilogue == CUBLASLT_EPILOGUE_RELU_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU)
        sum = std::max(sum, 0.0);
      if (epilogue == CUBLASLT_EPILOGUE_GELU_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU)
        sum = gelu_tanh(sum);
      d[static_cast<std::size_t>(i * l.n + j)] = sum;
    }
  return d;
}

// One cuBLASLt matmul: descriptors, heuristic, run. Returns the heuristic's count
// (0: not offered) and the cuBLASLt status of the run.
struct Outcome {
  int offered = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::size_t workspace = 0;
};

struct Matmul {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Outcome outcome;
  ~Matmul() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto l : {la, lb, lc, ld})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

enum class Mode { Block, OuterVec, Wide16 };

cudaDataType_t cuda_type(bool bf16) { return bf16 ? CUDA_R_16BF : CUDA_R_16F; }

// D^T [N, M] = W [N, K] (cuBLASLt's A, transposed) * x^T [K, M] (its B).
void build(Matmul& mm, cublasLtHandle_t h, Mode mode, std::int64_t m, std::int64_t n,
           std::int64_t k, bool bf16, cublasLtEpilogue_t epilogue, std::size_t workspace) {
  cublasLtMatmulDescCreate(&mm.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
  cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn));
  cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                 sizeof(epilogue));
  const cudaDataType_t operand = mode == Mode::Wide16 ? cuda_type(bf16) : CUDA_R_8F_E4M3;
  if (mode != Mode::Wide16) {
    const std::int32_t a_mode = mode == Mode::Block ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                    : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const std::int32_t b_mode = mode == Mode::Block ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                    : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                   sizeof(a_mode));
    cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                   sizeof(b_mode));
  }
  cublasLtMatrixLayoutCreate(&mm.la, operand, static_cast<std::uint64_t>(k),
                             static_cast<std::uint64_t>(n), k);
  cublasLtMatrixLayoutCreate(&mm.lb, operand, static_cast<std::uint64_t>(k),
                             static_cast<std::uint64_t>(m), k);
  cublasLtMatrixLayoutCreate(&mm.lc, cuda_type(bf16), static_cast<std::uint64_t>(n),
                             static_cast<std::uint64_t>(m), n);
  cublasLtMatrixLayoutCreate(&mm.ld, cuda_type(bf16), static_cast<std::uint64_t>(n),
                             static_cast<std::uint64_t>(m), n);
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  cublasLtMatmulHeuristicResult_t results[8] = {};
  int returned = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, mm.desc, mm.la, mm.lb, mm.lc, mm.ld,
                                                           pref, 8, results, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  mm.outcome.offered = hs == CUBLAS_STATUS_SUCCESS ? returned : -static_cast<int>(hs);
  if (returned > 0) {
    mm.algo = results[0].algo;
    mm.outcome.workspace = results[0].workspaceSize;
  }
}

struct Pointers {
  const void *w, *x, *w_scales, *x_scales, *bias, *c;
  void* d;
};

cublasStatus_t run(Matmul& mm, cublasLtHandle_t h, const Pointers& p, bool with_c, void* workspace,
                   std::size_t workspace_bytes, cudaStream_t stream) {
  if (p.w_scales != nullptr) {
    cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.w_scales,
                                   sizeof(p.w_scales));
    cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.x_scales,
                                   sizeof(p.x_scales));
  }
  cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                 sizeof(p.bias));
  const float alpha = 1.0f, beta = with_c ? 1.0f : 0.0f;
  return cublasLtMatmul(h, mm.desc, &alpha, p.w, mm.la, p.x, mm.lb, &beta, with_c ? p.c : p.d,
                        mm.lc, p.d, mm.ld, &mm.algo, workspace, workspace_bytes, stream);
}

double relative_error(const std::vector<double>& ref, const std::vector<std::uint16_t>& got,
                      bool bf16) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = bf16 ? bf16_bits_to_float(got[i]) : half_bits_to_float(got[i]);
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::vector<std::uint16_t> to_16bit(const std::vector<float>& v, bool bf16) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    out[i] = bf16 ? float_to_bf16_bits(v[i]) : float_to_half_bits(v[i]);
  return out;
}

constexpr std::size_t kWorkspace = std::size_t{32} << 20;

// Runs the block-scaled GEMM of `l` with the given scale buffers; error vs fp64.
double try_block(cublasLtHandle_t h, const Layer& l, const std::vector<float>& xs,
                 const std::vector<float>& ws, bool bf16, cublasLtEpilogue_t epilogue, bool with_c,
                 Outcome* outcome) {
  DeviceMemory x(l.x.size()), w(l.w.size()), dxs(xs.size() * 4), dws(ws.size() * 4),
      bias(static_cast<std::size_t>(l.n) * 2), c(l.c.size() * 2), d(l.c.size() * 2),
      workspace(kWorkspace);
  upload(x, l.x);
  upload(w, l.w);
  upload(dxs, xs);
  upload(dws, ws);
  upload(bias, to_16bit(l.bias, bf16));
  upload(c, to_16bit(l.c, bf16));
  PROBE_CUDA(cudaMemset(d.p, 0xff, l.c.size() * 2));  // NaN: a D left unwritten shows
  Matmul mm;
  build(mm, h, Mode::Block, l.m, l.n, l.k, bf16, epilogue, kWorkspace);
  *outcome = mm.outcome;
  if (mm.outcome.offered <= 0) return -1.0;
  outcome->status = run(mm, h, {w.p, x.p, dws.p, dxs.p, bias.p, c.p, d.p}, with_c, workspace.p,
                        kWorkspace, nullptr);
  PROBE_CUDA(cudaDeviceSynchronize());
  if (outcome->status != CUBLAS_STATUS_SUCCESS) return -1.0;
  std::vector<std::uint16_t> got(l.c.size());
  PROBE_CUDA(cudaMemcpy(got.data(), d.p, got.size() * 2, cudaMemcpyDeviceToHost));
  return relative_error(reference(l, epilogue, with_c), got, bf16);
}

void layouts(cublasLtHandle_t h) {
  std::printf("== layouts (bf16 D, no epilogue; the other operand's scales all 0.5)\n");
  const std::int64_t shapes[][3] = {{5, 1000, 1040},   {17, 384, 640},   {100, 1000, 1040},
                                    {128, 256, 384},   {64, 2112, 2000}, {7, 4096, 11008},
                                    {12, 11008, 4096}, {1, 512, 512},    {3, 200, 256}};
  for (const auto& s : shapes) {
    const Layer lx = make_layer(s[0], s[1], s[2], false, true, 1);
    for (ALayout a : {ALayout::OuterMajorLdM, ALayout::OuterMajorLdM4, ALayout::InnerMajor}) {
      Outcome o;
      const double e = try_block(h, lx, x_scale_buffer(lx, a), w_scale_buffer(lx, WLayout::RowLdKb),
                                 true, CUBLASLT_EPILOGUE_DEFAULT, false, &o);
      std::printf("M=%lld N=%lld K=%lld  %-44s offered %d status %d  rel err %.3e\n",
                  static_cast<long long>(s[0]), static_cast<long long>(s[1]),
                  static_cast<long long>(s[2]), name(a), o.offered, static_cast<int>(o.status), e);
    }
    const Layer lw = make_layer(s[0], s[1], s[2], true, false, 2);
    for (WLayout w : {WLayout::RowLdKb, WLayout::RowLdKb4, WLayout::ColLdNb, WLayout::ColLdNb4}) {
      Outcome o;
      const double e = try_block(h, lw, x_scale_buffer(lw, ALayout::OuterMajorLdM),
                                 w_scale_buffer(lw, w), true, CUBLASLT_EPILOGUE_DEFAULT, false, &o);
      std::printf("M=%lld N=%lld K=%lld  %-44s offered %d status %d  rel err %.3e\n",
                  static_cast<long long>(s[0]), static_cast<long long>(s[1]),
                  static_cast<long long>(s[2]), name(w), o.offered, static_cast<int>(o.status), e);
    }
  }
}

void epilogues(cublasLtHandle_t h) {
  std::printf("== epilogues (x scales kb*round_up(M,4)+m, W scales nb*round_up(KB,4)+kb)\n");
  struct Named {
    cublasLtEpilogue_t e;
    const char* name;
  };
  const Named list[] = {
      {CUBLASLT_EPILOGUE_DEFAULT, "DEFAULT"}, {CUBLASLT_EPILOGUE_BIAS, "BIAS"},
      {CUBLASLT_EPILOGUE_RELU, "RELU"},       {CUBLASLT_EPILOGUE_RELU_BIAS, "RELU_BIAS"},
      {CUBLASLT_EPILOGUE_GELU, "GELU"},       {CUBLASLT_EPILOGUE_GELU_BIAS, "GELU_BIAS"}};
  const Layer l = make_layer(100, 1000, 1040, false, false, 3);
  for (bool bf16 : {true, false})
    for (bool with_c : {false, true})
      for (const Named& e : list) {
        Outcome o;
        const double err = try_block(h, l, x_scale_buffer(l, ALayout::OuterMajorLdM4),
                                     w_scale_buffer(l, WLayout::RowLdKb4), bf16, e.e, with_c, &o);
        std::printf("%s D, %-9s %s  offered %d status %d workspace %zu  rel err %.3e\n",
                    bf16 ? "bf16" : "f16 ", e.name, with_c ? "C beta=1" : "no C    ", o.offered,
                    static_cast<int>(o.status), o.workspace, err);
      }
}

void timing(cublasLtHandle_t h) {
  std::printf("== timing (bf16 D, bias epilogue where offered, else default), us\n");
  const std::int64_t shapes[][3] = {{16, 11008, 4096},   {128, 11008, 4096},  {512, 11008, 4096},
                                    {2048, 11008, 4096}, {4096, 11008, 4096}, {4096, 4096, 11008},
                                    {2048, 7168, 18432}, {8192, 8192, 8192}};
  cudaStream_t stream = nullptr;
  PROBE_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  PROBE_CUDA(cudaEventCreate(&start));
  PROBE_CUDA(cudaEventCreate(&stop));
  DeviceMemory workspace(kWorkspace);
  for (const auto& s : shapes) {
    const std::int64_t m = s[0], n = s[1], k = s[2];
    DeviceMemory x(static_cast<std::size_t>(m * k * 2)), w(static_cast<std::size_t>(n * k * 2)),
        xs(static_cast<std::size_t>(round_up(m, 4) * ceil_div(k, 128) * 4 + 4 * m)),
        ws(static_cast<std::size_t>(round_up(ceil_div(k, 128), 4) * ceil_div(n, 128) * 4 + 4 * n)),
        bias(static_cast<std::size_t>(n * 2)), d(static_cast<std::size_t>(m * n * 2));
    // Small values: e4m3 codes 0x10-0x2f and bf16 near 1e-3 alike.
    PROBE_CUDA(cudaMemset(x.p, 0x21, static_cast<std::size_t>(m * k * 2)));
    PROBE_CUDA(cudaMemset(w.p, 0x12, static_cast<std::size_t>(n * k * 2)));
    std::vector<float> ones(static_cast<std::size_t>(round_up(m, 4) * ceil_div(k, 128) + m), 1.0f);
    upload(xs, ones);
    ones.assign(static_cast<std::size_t>(round_up(ceil_div(k, 128), 4) * ceil_div(n, 128) + n),
                1.0f);
    upload(ws, ones);
    PROBE_CUDA(cudaMemset(bias.p, 0, static_cast<std::size_t>(n * 2)));
    Matmul block, outer, wide;
    auto pick = [&](Matmul& mm, Mode mode) {
      build(mm, h, mode, m, n, k, true, CUBLASLT_EPILOGUE_BIAS, kWorkspace);
      if (mm.outcome.offered <= 0) {
        mm.~Matmul();
        new (&mm) Matmul();
        build(mm, h, mode, m, n, k, true, CUBLASLT_EPILOGUE_DEFAULT, kWorkspace);
      }
    };
    pick(block, Mode::Block);
    pick(outer, Mode::OuterVec);
    pick(wide, Mode::Wide16);
    Matmul* all[] = {&block, &outer, &wide};
    const Pointers fp8{w.p, x.p, ws.p, xs.p, bias.p, nullptr, d.p};
    const Pointers wide16{w.p, x.p, nullptr, nullptr, bias.p, nullptr, d.p};
    std::vector<std::vector<float>> times(3);
    for (int round = 0; round < 16; ++round)
      for (int c = 0; c < 3; ++c) {
        Matmul& mm = *all[c];
        if (mm.outcome.offered <= 0) continue;
        const Pointers& p = c == 2 ? wide16 : fp8;
        PROBE_CUDA(cudaEventRecord(start, stream));
        for (int i = 0; i < 20; ++i)
          mm.outcome.status = run(mm, h, p, false, workspace.p, kWorkspace, stream);
        PROBE_CUDA(cudaEventRecord(stop, stream));
        PROBE_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        PROBE_CUDA(cudaEventElapsedTime(&ms, start, stop));
        if (round > 0) times[static_cast<std::size_t>(c)].push_back(ms * 1000.0f / 20.0f);
      }
    auto median = [](std::vector<float> v) {
      if (v.empty()) return -1.0f;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double flop =
        2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    std::printf("%5lld x %5lld x %5lld:", static_cast<long long>(m), static_cast<long long>(n),
                static_cast<long long>(k));
    const char* names[] = {"block", "outer-vec", "bf16"};
    for (int c = 0; c < 3; ++c) {
      const float t = median(times[static_cast<std::size_t>(c)]);
      std::printf("  %s %.1f us (%.0f TFLOP/s, offered %d, status %d)", names[c], t,
                  t > 0 ? flop / t / 1e6 : 0.0, all[c]->outcome.offered,
                  static_cast<int>(all[c]->outcome.status));
    }
    std::printf("\n");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  int version = 0;
  cudaDeviceProp prop{};
  PROBE_CUDA(cudaGetDeviceProperties(&prop, 0));
  cublasLtHandle_t h = nullptr;
  cublasLtCreate(&h);
  std::printf("%s, cuBLASLt %zu\n", prop.name, cublasLtGetVersion());
  (void)version;
  std::vector<std::string> modes;
  for (int i = 1; i < argc; ++i) modes.emplace_back(argv[i]);
  if (modes.empty()) modes = {"layouts", "epilogues", "timing"};
  for (const auto& mode : modes) {
    if (mode == "layouts") layouts(h);
    if (mode == "epilogues") epilogues(h);
    if (mode == "timing") timing(h);
  }
  cublasLtDestroy(h);
  return 0;
}
