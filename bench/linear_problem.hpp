// What the cuBLASLt probes share: the GEMM of an nn.Linear layer and the
// comma-separated lists of their command lines.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/kernel_problems.hpp"

namespace ge2::bench {

// x [M, K] times nn.Linear's weight [N, K] transposed, plus a bias and `act`, into a dense D.
inline GemmProblem linear_problem(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k,
                                  Activation act = Activation::None) {
  GemmProblem p;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  p.trans_b = true;
  p.has_bias = true;
  p.act = act;
  p.a = {1, m, k, 0, k, 1};
  p.b = {1, n, k, 0, k, 1};
  p.d = {1, m, n, 0, n, 1};
  return p;
}

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

}  // namespace ge2::bench
