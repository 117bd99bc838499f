// pass_launch_probe: what does the erf-GELU pass after a cuBLASLt GEMM cost on
// layers under 20 us, and how much of it is the pass's launch? One nn.Linear
// layer (x [M, K] times W [N, K] transposed, bias) four ways, on the same
// tensors:
//   bias     cuBLASLt with the bias epilogue alone
//   tanh     cuBLASLt with its fused bias + tanh-GELU epilogue
//   erf      bias, then the library's flat erf-GELU pass in place, launched the
//            ordinary way
//   erf_dep  the same pass launched programmatically dependent on the GEMM
//            (src/backends/cuda/dependent_launch.cuh), as the library does
// each as R back-to-back layers captured in one CUDA graph ("graph", as
// graph_replay runs a plan) and launched on the stream ("eager"). Median of
// rounds, order rotated and reversed every round (bench/group_timer.hpp).
// erf and erf_dep must agree bit for bit.
// Built on request: cmake --build build --target pass_launch_probe.
//
//   pass_launch_probe [--rounds N] [--shapes MxNxK,...] [--dtypes f16,bf16]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_raii.hpp"
#include "backends/cuda/elementwise_flat.cuh"
#include "backends/cuda/lt_matmul.hpp"
#include "cuda_or_die.hpp"
#include "group_timer.hpp"
#include "linear_problem.hpp"

namespace {

using namespace ge2;
using namespace ge2::cuda;

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // a context's default
constexpr int kRepeats = 20;                                    // layers per timed group

// A cuBLASLt layer with the heuristic's first choice under the context's workspace.
struct Layer {
  LtMatmul matmul;
  cublasLtMatmulAlgo_t algo{};
  Layer(cublasLtHandle_t handle, const GemmProblem& p, KernelId kernel)
      : matmul(handle, p, kernel) {
    const auto choice = matmul.first_choice(kWorkspaceBytes, 16);
    if (!choice) {
      fmt::print(stderr, "cuBLASLt offers no algorithm for {}\n", p.shape_string());
      std::exit(1);
    }
    algo = choice->result.algo;
  }
};

template <typename T>
void probe(DType dtype, KernelId kernel, std::int64_t m, std::int64_t n, std::int64_t k, int rounds,
           cublasLtHandle_t handle, cudaStream_t stream) {
  std::mt19937 engine(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto device_random = [&](std::int64_t count, float scale) {
    std::vector<T> host(count);
    for (auto& v : host) v = T(normal(engine) * scale);
    void* d = nullptr;
    CUDA_OR_DIE(cudaMalloc(&d, count * sizeof(T)));
    CUDA_OR_DIE(cudaMemcpy(d, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  };
  void* x = device_random(m * k, 1.f);
  void* w = device_random(n * k, 1.f / std::sqrt(float(k)));
  void* bias = device_random(n, 1.f);
  void *d = nullptr, *workspace = nullptr;
  CUDA_OR_DIE(cudaMalloc(&d, m * n * sizeof(T)));
  CUDA_OR_DIE(cudaMalloc(&workspace, kWorkspaceBytes));

  Layer biased(handle, bench::linear_problem(dtype, m, n, k), kernel);
  Layer tanh_fused(handle, bench::linear_problem(dtype, m, n, k, Activation::GeluTanh), kernel);
  const LtPointers pointers{x, w, nullptr, bias, d};
  const flat::Params pass{d,
                          nullptr,
                          nullptr,
                          d,
                          m * n * std::int64_t(sizeof(T)) / 16,
                          n * std::int64_t(sizeof(T)) / 16,
                          false};
  using ErfOp = FixedOp<Identity, 0, GeluErf>;
  auto erf_layer = [&](bool dependent) {
    return [&, dependent] {
      biased.matmul.run(biased.algo, pointers, workspace, kWorkspaceBytes, stream);
      CUDA_OR_DIE((flat::launch<T, flat::Config<128, 1>>(pass, ErfOp{}, stream, dependent)));
    };
  };
  struct Variant {
    const char* name;
    std::function<void()> run;
  };
  const std::vector<Variant> variants = {
      {"bias",
       [&] { biased.matmul.run(biased.algo, pointers, workspace, kWorkspaceBytes, stream); }},
      {"tanh",
       [&] {
         tanh_fused.matmul.run(tanh_fused.algo, pointers, workspace, kWorkspaceBytes, stream);
       }},
      {"erf", erf_layer(false)},
      {"erf_dep", erf_layer(true)}};

  // erf and erf_dep on a poisoned D: the same bits.
  std::vector<unsigned char> plain(m * n * sizeof(T)), dependent(plain.size());
  for (int v : {2, 3}) {
    CUDA_OR_DIE(cudaMemsetAsync(d, 0xff, plain.size(), stream));
    variants[v].run();
    CUDA_OR_DIE(cudaMemcpyAsync(v == 2 ? plain.data() : dependent.data(), d, plain.size(),
                                cudaMemcpyDeviceToHost, stream));
    CUDA_OR_DIE(cudaStreamSynchronize(stream));
  }
  const bool same = plain == dependent;

  std::vector<cudaGraphExec_t> graphs;
  for (const auto& v : variants) {
    cudaGraph_t graph;
    CUDA_OR_DIE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < kRepeats; ++r) v.run();
    CUDA_OR_DIE(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    CUDA_OR_DIE(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OR_DIE(cudaGraphDestroy(graph));
    graphs.push_back(exec);
  }
  GroupTimer timer;
  for (const char* mode : {"graph", "eager"}) {
    const bool graph = !std::strcmp(mode, "graph");
    std::vector<std::vector<double>> times(variants.size());
    for (int round = 0; round < rounds; ++round)
      for (std::size_t v : rotated_order(variants.size(), round)) {
        auto group = [&](int) {
          if (graph) {
            CUDA_OR_DIE(cudaGraphLaunch(graphs[v], stream));
          } else {
            for (int r = 0; r < kRepeats; ++r) variants[v].run();
          }
        };
        group(0);  // warm
        times[v].push_back(timer.time_group(group, 1, 0, stream) / kRepeats);
      }
    std::string line = fmt::format("| {} | {}x{}x{} | {} |", dtype_name(dtype), m, n, k, mode);
    for (auto& t : times) line += fmt::format(" {:.2f} |", median_of(t));
    fmt::print("{}{}\n", line, same ? "" : " erf_dep DIFFERS from erf");
    std::fflush(stdout);
  }
  for (auto g : graphs) CUDA_OR_DIE(cudaGraphExecDestroy(g));
  for (void* p : {x, w, bias, d, workspace}) CUDA_OR_DIE(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes =
      "16x4096x4096,128x4096x4096,512x1024x512,1x4096x4096,256x4096x1024,"
      "2048x4096x1024,300x11008x4096,8x11008x4096";
  std::string dtypes = "f16,bf16";
  int rounds = 15;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--shapes" && i + 1 < argc) {
      shapes = argv[++i];
    } else if (flag == "--dtypes" && i + 1 < argc) {
      dtypes = argv[++i];
    } else if (flag == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      fmt::print(
          stderr,
          "usage: pass_launch_probe [--rounds N] [--shapes MxNxK,...] [--dtypes f16,bf16]\n");
      return 2;
    }
  }
  cudaDeviceProp props{};
  CUDA_OR_DIE(cudaGetDeviceProperties(&props, 0));
  fmt::print("{}; us per layer, median of {} rounds of {} layers\n\n", props.name, rounds,
             kRepeats);
  fmt::print(
      "| dtype | MxNxK | mode | bias | tanh | erf | erf_dep "
      "|\n|---|---|---|---:|---:|---:|---:|\n");
  LtHandle handle = make_lt_handle();
  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const auto& dt : bench::split_commas(dtypes))
    for (const auto& shape : bench::split_commas(shapes)) {
      long long m = 0, n = 0, k = 0;
      if (std::sscanf(shape.c_str(), "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 1 || n % 8 ||
          k % 8) {
        fmt::print(stderr, "--shapes: '{}' is not MxNxK with N and K multiples of 8\n", shape);
        return 2;
      }
      if (dt == "f16")
        probe<__half>(DType::F16, KernelId::LtF16, m, n, k, rounds, handle.get(), stream);
      else if (dt == "bf16")
        probe<__nv_bfloat16>(DType::BF16, KernelId::LtBf16, m, n, k, rounds, handle.get(), stream);
      else {
        fmt::print(stderr, "--dtypes: '{}' is not f16 or bf16\n", dt);
        return 2;
      }
    }
  return 0;
}
