// lt_algo_probe: questions about cuBLASLt's algorithms that the tuner's design
// rests on, for nn.Linear layer shapes (x [M, K] times W [N, K] transposed,
// bias), fp16 and bf16, timed on the tuner's rig (operands rotated through more
// memory than L2, contenders interleaved, median of 7 batches).
//
// Default: does an algorithm rebuilt from its configuration attributes (what the
// tuning database stores) equal, word for word, the descriptor the heuristic
// returned, for each of the heuristic's algorithms, and does it run as fast? And
// the heuristic's first choice under workspace limits of 32, 4, 1 and 0 MiB.
// Run 26 (H100, cuBLASLt 13.1): equal for all of them on 20 shapes.
//
// --conditions: the heuristic's first algorithm against the one the rig times
// fastest, each also timed alone after the rig's sustained warm-up, with
// operands rotated and on one set of operands (as a benchmark replaying one
// call on the same tensors).
//
// --fp8: what tuning could gain on the FP8 rows (lt_fp8_e4m3 takes cuBLASLt's
// heuristic choice): up to 8 of the heuristic's e4m3 algorithms with and without
// fast accumulation, with per-tensor and with row-wise (OUTER_VEC_32F) scales,
// on operands quantized beforehand, interleaved with the 16-bit heuristic choice
// on the same tensors and with the step's own work (A quantized row-wise, then
// the GEMM); and the quantization alone, plain and applying erf GELU (the
// activation the plan defers into it), with the bandwidth it reaches.
//
// Built on request: cmake --build build --target lt_algo_probe.
//
//   lt_algo_probe [--conditions | --fp8] [--shapes MxNxK,...] [--dtypes f16,bf16]
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/algo_config.hpp"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/lt_matmul.hpp"
#include "backends/cuda/timing_rig.hpp"
#include "linear_problem.hpp"

namespace {

using namespace ge2;
using namespace ge2::cuda;

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // a context's default
constexpr std::size_t kWorkspaceLimits[] = {kWorkspaceBytes, std::size_t{4} << 20,
                                            std::size_t{1} << 20, 0};

std::string differing_words(const cublasLtMatmulAlgo_t& x, const cublasLtMatmulAlgo_t& y) {
  std::string words;
  for (int i = 0; i < 8; ++i)
    if (x.data[i] != y.data[i])
      words +=
          fmt::format("{}{}:{:016x}->{:016x}", words.empty() ? "" : " ", i, x.data[i], y.data[i]);
  return words;
}

// --conditions: the heuristic's first algorithm against the one the tuner's rig
// times fastest, each timed (a) on the rig, interleaved with every candidate,
// operands rotated through more than L2 (as the tuner times them), (b) alone
// after the rig's sustained warm-up, operands rotated, (c) alone on one set of
// operands, as a benchmark replaying one call on the same tensors does.
void compare_conditions(cublasLtHandle_t handle, const GemmProblem& problem, KernelId kernel,
                        int l2, const std::string& label) {
  LtMatmul matmul(handle, problem, kernel);
  const auto candidates = matmul.heuristic(32, kWorkspaceBytes, 16);
  if (candidates.empty()) return;
  TimingRig rig(problem, l2, kWorkspaceBytes);
  auto run = [&](const cublasLtMatmulAlgo_t& algo, bool rotate) -> Contender {
    return [&, algo, rotate](int set) {
      matmul.run(algo, rig.pointers(rotate ? set : 0, rig.output()), rig.workspace(),
                 kWorkspaceBytes, rig.stream());
    };
  };
  std::vector<Contender> all;
  for (const auto& c : candidates) all.push_back(run(c.algo, true));
  const std::vector<double> mixed = rig.interleaved_medians_us(all);
  const std::size_t best =
      static_cast<std::size_t>(std::min_element(mixed.begin(), mixed.end()) - mixed.begin());
  for (std::size_t i : {std::size_t{0}, best}) {
    const AlgoConfig c = read_algo_config(candidates[i].algo);
    const double alone_rotated = rig.median_us(run(candidates[i].algo, true));
    const double alone_same = rig.median_us(run(candidates[i].algo, false));
    fmt::print("| {} | {} | tile {} cluster {} option {} | {:.1f} | {:.1f} | {:.1f} |\n", label,
               i == 0 ? (best == 0 ? "heuristic = rig's fastest" : "heuristic") : "rig's fastest",
               c.tile, c.cluster_shape, c.custom_option, mixed[i], alone_rotated, alone_same);
    std::fflush(stdout);
    if (best == 0) break;
  }
}

// --fp8, one shape: the table rows described at the top.
void probe_fp8(cublasLtHandle_t handle, std::int64_t m, std::int64_t n, std::int64_t k, int l2,
               int sm_count) {
  const GemmProblem problem = bench::linear_problem(DType::F16, m, n, k);
  TimingRig rig(problem, l2, kWorkspaceBytes);
  // Per input set: row-wise e4m3 copies of A [M, K] and W [N, K] (already
  // K-contiguous, as the step writes them) and their row scales. A per-tensor
  // algorithm reads the first scale of each.
  const MatrixView a_view{1, m, k, 0, k, 1}, b_view{1, n, k, 0, k, 1};
  struct Operand {
    DeviceBuffer data, scales;
  };
  std::vector<Operand> a_q, b_q;
  auto quantize = [&](const MatrixView& view, const void* src, Operand& q,
                      Activation act = Activation::None) {
    launch_quantize_e4m3_rows(DType::F16, view, src, static_cast<std::uint8_t*>(q.data.data()),
                              static_cast<float*>(q.scales.data()), sm_count, rig.stream(), act);
  };
  for (int set = 0; set < rig.sets(); ++set) {
    const LtPointers in = rig.pointers(set, rig.output());
    a_q.push_back({DeviceBuffer(static_cast<std::size_t>(m * k)),
                   DeviceBuffer(sizeof(float) * static_cast<std::size_t>(m))});
    b_q.push_back({DeviceBuffer(static_cast<std::size_t>(n * k)),
                   DeviceBuffer(sizeof(float) * static_cast<std::size_t>(n))});
    quantize(a_view, in.a, a_q.back());
    quantize(b_view, in.b, b_q.back());
  }
  if (cudaStreamSynchronize(rig.stream()) != cudaSuccess) return;

  std::vector<std::string> labels;
  std::vector<Contender> contenders;
  LtMatmul f16(handle, problem, KernelId::LtF16);
  const auto f16_first = f16.heuristic(1, kWorkspaceBytes, 16);
  if (!f16_first.empty()) {
    labels.push_back("lt_f16, heuristic");
    contenders.push_back([&, algo = f16_first.front().algo](int set) {
      f16.run(algo, rig.pointers(set, rig.output()), rig.workspace(), kWorkspaceBytes,
              rig.stream());
    });
  }
  const auto* stand_in = reinterpret_cast<const float*>(std::uintptr_t{256});
  std::vector<std::unique_ptr<LtMatmul>> matmuls;
  auto fp8_contender = [&](LtMatmul& mm, const cublasLtMatmulAlgo_t& algo, bool quantize_a) {
    return [&, algo, quantize_a](int set) {
      const LtPointers in = rig.pointers(set, rig.output());
      Operand& a = a_q[static_cast<std::size_t>(set)];
      Operand& b = b_q[static_cast<std::size_t>(set)];
      if (quantize_a) quantize(a_view, in.a, a);
      mm.set_scale_pointers(static_cast<const float*>(b.scales.data()),
                            static_cast<const float*>(a.scales.data()));
      mm.run(algo, {a.data.data(), b.data.data(), nullptr, in.bias, in.d}, rig.workspace(),
             kWorkspaceBytes, rig.stream());
    };
  };
  for (const bool outer : {false, true})
    for (KernelId kernel : {KernelId::LtFp8E4M3, KernelId::LtFp8E4M3Fast}) {
      auto& mm = *matmuls.emplace_back(std::make_unique<LtMatmul>(handle, problem, kernel));
      if (outer) mm.set_scale_mode(CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
      mm.set_scale_pointers(stand_in, stand_in + 64);
      std::vector<cublasLtMatmulHeuristicResult_t> candidates;
      for (std::size_t limit : {kWorkspaceBytes, std::size_t{0}}) {
        try {
          candidates = mm.heuristic(8, limit, 16);
          if (limit == 0)
            fmt::print("{}x{}x{}: {} {}: algorithms offered without workspace\n", m, n, k,
                       kernel_name(kernel), outer ? "row-wise" : "per-tensor");
          break;
        } catch (const std::exception& e) {
          fmt::print("{}x{}x{}: {} {}, workspace {} MiB: {}\n", m, n, k, kernel_name(kernel),
                     outer ? "row-wise" : "per-tensor", limit >> 20, e.what());
        }
      }
      if (candidates.empty())
        fmt::print("{}x{}x{}: cuBLASLt offers no {} algorithm with {} scales\n", m, n, k,
                   kernel_name(kernel), outer ? "outer-vector" : "per-tensor");
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        const AlgoConfig c = read_algo_config(candidates[i].algo);
        labels.push_back(
            fmt::format("{} {} #{}: algo {} tile {} stages {} cluster {} split {} option {}",
                        kernel_name(kernel), outer ? "row-wise" : "per-tensor", i, c.algo_id,
                        c.tile, c.stages, c.cluster_shape, c.split_k, c.custom_option));
        contenders.push_back(fp8_contender(mm, candidates[i].algo, false));
      }
      if (outer && kernel == KernelId::LtFp8E4M3Fast && !candidates.empty()) {
        labels.push_back("the step's work: quantize A row-wise (one pass) + row-wise fast #0");
        contenders.push_back(fp8_contender(mm, candidates.front().algo, true));
      }
    }
  // The quantization alone, plain and applying a deferred erf GELU (A is read
  // as 16 bits once, written as e4m3 once, plus a float scale per row).
  const std::size_t quantizers = labels.size();
  for (const Activation act : {Activation::None, Activation::GeluErf}) {
    labels.push_back(fmt::format("quantize A alone, activation {}", activation_name(act)));
    contenders.push_back([&, act](int set) {
      quantize(a_view, rig.pointers(set, rig.output()).a, a_q[static_cast<std::size_t>(set)], act);
    });
  }
  const std::vector<double> us = rig.interleaved_medians_us(contenders);
  const double flop =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double quantized_bytes = 3.0 * static_cast<double>(m) * static_cast<double>(k) + 4.0 * m;
  for (std::size_t i = 0; i < us.size(); ++i)
    if (i < quantizers)
      fmt::print("| {}x{}x{} | {} | {:.1f} | {:.0f} |\n", m, n, k, labels[i], us[i],
                 flop / us[i] * 1e-6);
    else
      fmt::print("| {}x{}x{} | {} | {:.1f} | {:.0f} GB/s |\n", m, n, k, labels[i], us[i],
                 quantized_bytes / us[i] * 1e-3);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes =
      "4096x11008x4096,4096x4096x11008,4096x4096x4096,16384x4096x1024,2048x4096x1024,"
      "512x11008x4096,300x4096x11008,512x1024x512,128x4096x4096,16x4096x4096";
  std::string dtypes = "f16,bf16";
  bool conditions = false, fp8 = false, shapes_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--conditions")
      conditions = true;
    else if (flag == "--fp8")
      fp8 = true;
    else if (flag == "--shapes" && i + 1 < argc)
      shapes = argv[++i], shapes_given = true;
    else if (flag == "--dtypes" && i + 1 < argc)
      dtypes = argv[++i];
    else {
      std::fprintf(
          stderr,
          "usage: lt_algo_probe [--conditions | --fp8] [--shapes MxNxK,...] [--dtypes f16,bf16]\n");
      return 2;
    }
  }
  cublasLtHandle_t raw = nullptr;
  if (cublasLtCreate(&raw) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "lt_algo_probe: no cuBLASLt handle (no device?)\n");
    return 1;
  }
  LtHandle handle(raw);
  int device = 0, l2 = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  fmt::print("device {}, cuBLASLt {}\n", prop.name, cublasLtGetVersion());
  if (fp8) {
    if (!shapes_given)
      shapes = "8192x8192x8192,4096x11008x4096,4096x4096x11008,2048x11008x4096,16384x4096x1024";
    fmt::print("| M×N×K | contender | µs | TFLOP/s |\n|---|---|---:|---:|\n");
    for (const std::string& shape : bench::split_commas(shapes)) {
      long long m = 0, n = 0, k = 0;
      if (std::sscanf(shape.c_str(), "%lldx%lldx%lld", &m, &n, &k) != 3) return 2;
      probe_fp8(handle.get(), m, n, k, l2, prop.multiProcessorCount);
    }
    return 0;
  }
  if (conditions) {
    fmt::print(
        "| dtype M×N×K | algorithm | configuration | rig, interleaved, rotated µs | alone, "
        "rotated µs | alone, same tensors µs |\n|---|---|---|---:|---:|---:|\n");
    for (const std::string& dtype_text : bench::split_commas(dtypes))
      for (const std::string& shape : bench::split_commas(shapes)) {
        long long m = 0, n = 0, k = 0;
        if (std::sscanf(shape.c_str(), "%lldx%lldx%lld", &m, &n, &k) != 3) return 2;
        const DType dtype = dtype_text == "bf16" ? DType::BF16 : DType::F16;
        compare_conditions(handle.get(), bench::linear_problem(dtype, m, n, k),
                           dtype == DType::BF16 ? KernelId::LtBf16 : KernelId::LtF16, l2,
                           dtype_text + " " + shape);
      }
    return 0;
  }
  fmt::print(
      "| dtype | M×N×K | rebuilt ≠ heuristic | words that differ (first algorithm) | "
      "heuristic µs | heuristic again µs | rebuilt µs | rebuilt / heuristic |\n"
      "|---|---|---:|---|---:|---:|---:|---:|\n");
  std::vector<std::string> workspace_lines;
  for (const std::string& dtype_text : bench::split_commas(dtypes)) {
    const DType dtype = dtype_text == "bf16" ? DType::BF16 : DType::F16;
    const KernelId kernel = dtype == DType::BF16 ? KernelId::LtBf16 : KernelId::LtF16;
    for (const std::string& shape : bench::split_commas(shapes)) {
      long long m = 0, n = 0, k = 0;
      if (std::sscanf(shape.c_str(), "%lldx%lldx%lld", &m, &n, &k) != 3) {
        std::fprintf(stderr, "lt_algo_probe: bad shape %s\n", shape.c_str());
        return 2;
      }
      const GemmProblem problem = bench::linear_problem(dtype, m, n, k);
      LtMatmul matmul(handle.get(), problem, kernel);
      const auto results = matmul.heuristic(32, kWorkspaceBytes, 16);
      if (results.empty()) continue;
      int differ = 0;
      std::vector<cublasLtMatmulAlgo_t> rebuilt;
      for (const auto& r : results) {
        const auto again = build_algo(handle.get(), matmul, read_algo_config(r.algo));
        rebuilt.push_back(again.value_or(cublasLtMatmulAlgo_t{}));
        if (!again || std::memcmp(&r.algo, &*again, sizeof(r.algo)) != 0) ++differ;
      }
      TimingRig rig(problem, l2, kWorkspaceBytes);
      auto contender = [&](const cublasLtMatmulAlgo_t& algo) -> Contender {
        return [&, algo](int set) {
          matmul.run(algo, rig.pointers(set, rig.output()), rig.workspace(), kWorkspaceBytes,
                     rig.stream());
        };
      };
      // The heuristic's algorithm twice: the spread between two contenders of one algorithm.
      const std::vector<Contender> contenders{contender(results.front().algo),
                                              contender(results.front().algo),
                                              contender(rebuilt.front())};
      const std::vector<double> us = rig.interleaved_medians_us(contenders);
      fmt::print("| {} | {} | {} of {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.3f} |\n", dtype_text,
                 shape, differ, results.size(),
                 differing_words(results.front().algo, rebuilt.front()), us[0], us[1], us[2],
                 us[2] / us[0]);
      std::fflush(stdout);

      // The heuristic's first choice under smaller workspace limits (split-K and
      // its reduction need workspace): what the limit costs or saves.
      std::vector<Contender> by_limit;
      std::string line = fmt::format("| {} | {} |", dtype_text, shape);
      std::vector<std::string> labels;
      for (std::size_t limit : kWorkspaceLimits) {
        const auto first = matmul.heuristic(1, limit, 16);
        if (first.empty()) {
          labels.push_back("none");
          by_limit.push_back([](int) {});
          continue;
        }
        const AlgoConfig c = read_algo_config(first.front().algo);
        labels.push_back(fmt::format("algo {} tile {} split {} red {} ws {} KiB", c.algo_id, c.tile,
                                     c.split_k, c.reduction_scheme,
                                     first.front().workspaceSize >> 10));
        by_limit.push_back(contender(first.front().algo));
      }
      const std::vector<double> limit_us = rig.interleaved_medians_us(by_limit);
      for (std::size_t i = 0; i < labels.size(); ++i)
        line += fmt::format(" {:.1f} ({}) |", limit_us[i], labels[i]);
      workspace_lines.push_back(line);
    }
  }
  fmt::print(
      "\n| dtype | M×N×K | first choice, workspace ≤ 32 MiB | ≤ 4 MiB | ≤ 1 MiB | none |\n"
      "|---|---|---|---|---|---|\n");
  for (const std::string& line : workspace_lines) fmt::print("{}\n", line);
  return 0;
}
