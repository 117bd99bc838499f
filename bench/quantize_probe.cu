// quantize_probe: which geometry of the row-wise e4m3 quantization's register
// form (src/backends/cuda/fp8_quantize_rows.cuh: threads per block, 16-byte
// words per thread, kept as floats or as the loaded words) reads a 16-bit
// operand fastest, plain and applying erf GELU (the activation a plan defers
// into it)? Run 30 (H100) chose the library's per activation (LibraryShortRows). The
// source rotates through copies spanning 4x L2 (as an activation just written
// by another GEMM would mostly come from memory); each variant runs R launches
// between two events (bench/group_timer.hpp), median of rounds, order rotated
// and reversed every round. Every variant's bytes and scales must equal the
// library's bit for bit. Built on request: cmake --build build --target quantize_probe.
//
//   quantize_probe [--rounds N] [--shapes ROWSxCOLS,...]
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/fp8_quantize_rows.cuh"
#include "cuda_or_die.hpp"
#include "group_timer.hpp"

namespace {

using namespace ge2;
using namespace ge2::cuda;

struct Shape {
  long long rows, cols;
};

struct Variant {
  std::string name;
  long long max_cols;
  std::function<void(const __half*, quantize::View, __nv_fp8_storage_t*, float*, cudaStream_t)>
      launch;
};

template <typename Cfg, typename Act>
Variant variant(int sm_count, const char* prefix = "") {
  return {fmt::format("{}{}x{}{}", prefix, Cfg::kThreads, Cfg::kGroups, Cfg::kRaw ? " raw" : ""),
          Cfg::kMaxCols,
          [sm_count](const __half* src, quantize::View v, __nv_fp8_storage_t* dst, float* scales,
                     cudaStream_t stream) {
            const auto blocks =
                static_cast<unsigned>(std::clamp<long long>(v.rows, 1, 16LL * sm_count));
            CUDA_OR_DIE(launch_dependent(false, quantize::short_rows_kernel<__half, Cfg, Act>,
                                         dim3(blocks), dim3(Cfg::kThreads), 0, stream, src, v, dst,
                                         scales, Act{}));
          }};
}

// The library's geometry first (fp8_quantize.cu), then its neighbours.
template <typename Act>
std::vector<Variant> variants(int sm_count) {
  using quantize::ShortRows;
  return {variant<quantize::LibraryShortRows<Act>, Act>(sm_count, "library "),
          variant<ShortRows<256, 8, false>, Act>(sm_count),
          variant<ShortRows<256, 8, true>, Act>(sm_count),
          variant<ShortRows<128, 16, true>, Act>(sm_count),
          variant<ShortRows<512, 4, false>, Act>(sm_count),
          variant<ShortRows<512, 4, true>, Act>(sm_count),
          variant<ShortRows<1024, 2, false>, Act>(sm_count)};
}

template <typename Act>
void probe(const char* act_name, const std::vector<Shape>& shapes, int rounds,
           const cudaDeviceProp& props, cudaStream_t stream) {
  const auto vs = variants<Act>(props.multiProcessorCount);
  GroupTimer timer;
  std::mt19937 engine(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const Shape& shape : shapes) {
    const long long elements = shape.rows * shape.cols;
    const std::size_t bytes = elements * sizeof(__half);
    std::vector<__half> host(elements);
    for (auto& v : host) v = __float2half(normal(engine));
    const int copies = static_cast<int>(
        std::max<std::size_t>(2, (4 * std::size_t(props.l2CacheSize)) / bytes + 1));
    std::vector<__half*> sources(copies);
    for (auto& b : sources) {
      CUDA_OR_DIE(cudaMalloc(&b, bytes));
      CUDA_OR_DIE(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    __nv_fp8_storage_t* dst;
    float* scales;
    CUDA_OR_DIE(cudaMalloc(&dst, elements));
    CUDA_OR_DIE(cudaMalloc(&scales, shape.rows * sizeof(float)));
    const quantize::View view{shape.rows, shape.cols, shape.cols, 1};
    std::vector<unsigned char> first(elements + shape.rows * sizeof(float)), got(first.size());
    std::vector<int> state(vs.size(), 0);  // 0 same as the library's, 1 differs, 2 cannot run
    for (std::size_t v = 0; v < vs.size(); ++v) {
      if (shape.cols > vs[v].max_cols) {
        state[v] = 2;
        continue;
      }
      CUDA_OR_DIE(cudaMemsetAsync(dst, 0xff, elements, stream));
      vs[v].launch(sources[0], view, dst, scales, stream);
      CUDA_OR_DIE(cudaGetLastError());
      auto& out = v ? got : first;
      CUDA_OR_DIE(cudaMemcpyAsync(out.data(), dst, elements, cudaMemcpyDeviceToHost, stream));
      CUDA_OR_DIE(cudaMemcpyAsync(out.data() + elements, scales, shape.rows * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
      CUDA_OR_DIE(cudaStreamSynchronize(stream));
      if (v) state[v] = got == first ? 0 : 1;
    }
    std::vector<std::vector<double>> times(vs.size());
    for (int round = 0; round < rounds; ++round)
      for (std::size_t v : rotated_order(vs.size(), round)) {
        if (state[v] == 2) continue;
        times[v].push_back(timer.time_group(
            [&](int r) { vs[v].launch(sources[r % copies], view, dst, scales, stream); }, 20, 0,
            stream));
      }
    std::string line = fmt::format("f16 {} {:5d}x{:5d}:", act_name, shape.rows, shape.cols);
    const double traffic = 3.0 * elements + 4.0 * shape.rows;
    for (std::size_t v = 0; v < vs.size(); ++v) {
      if (state[v] == 2) continue;
      const double us = median_of(times[v]);
      line += fmt::format("  {} {:.2f} us {:.0f} GB/s{}", vs[v].name, us, traffic / (us * 1e3),
                          state[v] ? " MISMATCH" : "");
    }
    fmt::print("{}\n", line);
    std::fflush(stdout);
    for (auto* b : sources) CUDA_OR_DIE(cudaFree(b));
    CUDA_OR_DIE(cudaFree(dst));
    CUDA_OR_DIE(cudaFree(scales));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 9;
  std::vector<Shape> shapes = {{16, 4096},   {256, 11008}, {2048, 4096},  {2048, 11008},
                               {8192, 4096}, {8192, 8192}, {8192, 11008}, {4096, 14336}};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc) {
      shapes.clear();
      for (char* item = std::strtok(argv[++i], ","); item; item = std::strtok(nullptr, ",")) {
        Shape s{};
        if (std::sscanf(item, "%lldx%lld", &s.rows, &s.cols) != 2 || s.rows < 1 || s.cols < 8 ||
            s.cols % 8) {
          fmt::print(stderr, "--shapes: '{}' is not ROWSxCOLS with COLS a multiple of 8\n", item);
          return 2;
        }
        shapes.push_back(s);
      }
    }
  }
  cudaDeviceProp props{};
  CUDA_OR_DIE(cudaGetDeviceProperties(&props, 0));
  fmt::print("{}, {} SMs, L2 {} MB\n", props.name, props.multiProcessorCount,
             props.l2CacheSize >> 20);
  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  probe<Identity>("none", shapes, rounds, props, stream);
  probe<GeluErf>("gelu_erf", shapes, rounds, props, stream);
  return 0;
}
