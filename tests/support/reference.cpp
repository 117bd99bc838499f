#include "support/reference.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

namespace ge2::test {

std::int64_t HostTensor::span() const {
  std::int64_t last = 0;
  for (int i = 0; i < rank; ++i) last += (shape[i] - 1) * strides[i];
  return last + 1;
}

std::int64_t HostTensor::offset(std::int64_t b, std::int64_t i, std::int64_t j) const {
  if (rank == 3) return b * strides[0] + i * strides[1] + j * strides[2];
  return i * strides[0] + j * strides[1];
}

double HostTensor::get(std::int64_t offset_elements) const {
  return load_as_float(bytes.data(), static_cast<DType>(dtype), offset_elements);
}

void HostTensor::set(std::int64_t offset_elements, double value) {
  store_from_float(bytes.data(), static_cast<DType>(dtype), offset_elements,
                   static_cast<float>(value));
}

ge2_tensor_desc_t HostTensor::desc() const {
  ge2_tensor_desc_t d{};
  d.dtype = dtype;
  d.rank = rank;
  for (int i = 0; i < rank; ++i) {
    d.shape[i] = shape[i];
    d.strides[i] = strides[i];
  }
  return d;
}

HostTensor make_tensor(ge2_dtype_t dtype, std::vector<std::int64_t> shape,
                       std::vector<std::int64_t> strides) {
  HostTensor t;
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  std::int64_t dense = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.shape[i] = shape[static_cast<std::size_t>(i)];
    t.strides[i] = strides.empty() ? dense : strides[static_cast<std::size_t>(i)];
    dense *= t.shape[i];
  }
  t.bytes.assign(static_cast<std::size_t>(t.span()) * t.element_size(), 0);
  return t;
}

std::mt19937_64& rng() {
  static std::mt19937_64 engine = [] {
    const auto seed = static_cast<std::uint64_t>(
        std::chrono::high_resolution_clock::now().time_since_epoch().count());
    std::printf("test random seed: %llu\n", static_cast<unsigned long long>(seed));
    return std::mt19937_64(seed);
  }();
  return engine;
}

void fill_random(HostTensor& t, double low, double high) {
  std::uniform_real_distribution<double> dist(low, high);
  const std::int64_t n = t.span();
  for (std::int64_t i = 0; i < n; ++i) t.set(i, dist(rng()));
}

void poison(HostTensor& t) {
  const std::int64_t n = t.span();
  for (std::int64_t i = 0; i < n; ++i) t.set(i, std::numeric_limits<double>::quiet_NaN());
}

double activation_ref(ge2_activation_t act, double x) {
  switch (act) {
    case GE2_ACT_NONE:
      return x;
    case GE2_ACT_RELU:
      return x > 0 ? x : 0;
    case GE2_ACT_GELU_ERF:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case GE2_ACT_GELU_TANH:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case GE2_ACT_SILU:
      return x / (1.0 + std::exp(-x));
    case GE2_ACT_QUICK_GELU:
      return x / (1.0 + std::exp(-1.702 * x));
    default:
      break;
  }
  return x;
}

std::vector<double> dense_values(const HostTensor& t, std::int64_t batch, bool transposed,
                                 std::int64_t rows, std::int64_t cols) {
  std::vector<double> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      out[static_cast<std::size_t>(r * cols + c)] =
          t.get(transposed ? t.offset(batch, c, r) : t.offset(batch, r, c));
  return out;
}

std::vector<double> gemm_reference(const HostTensor& a, const HostTensor& b, const HostTensor* c,
                                   const HostTensor* bias, const GemmRef& attrs) {
  const int ar = a.rank, br = b.rank;
  const std::int64_t m = attrs.trans_a ? a.shape[ar - 1] : a.shape[ar - 2];
  const std::int64_t k = attrs.trans_a ? a.shape[ar - 2] : a.shape[ar - 1];
  const std::int64_t n = attrs.trans_b ? b.shape[br - 2] : b.shape[br - 1];
  const std::int64_t batch = ar == 3 ? a.shape[0] : (br == 3 ? b.shape[0] : 1);
  std::vector<double> out(static_cast<std::size_t>(batch * m * n));
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    // op(A) as M x K and op(B) transposed, N x K, each element decoded once: the
    // inner loop walks both along K over contiguous doubles.
    const std::vector<double> op_a = dense_values(a, ar == 3 ? bi : 0, attrs.trans_a, m, k);
    const std::vector<double> op_b_t = dense_values(b, br == 3 ? bi : 0, !attrs.trans_b, n, k);
    for (std::int64_t i = 0; i < m; ++i) {
      const double* row = op_a.data() + i * k;
      for (std::int64_t j = 0; j < n; ++j) {
        const double* column = op_b_t.data() + j * k;
        double acc = 0;
        for (std::int64_t kk = 0; kk < k; ++kk) acc += row[kk] * column[kk];
        double value = attrs.alpha * acc;
        if (c != nullptr) value += attrs.beta * c->get(c->offset(bi, i, j));
        if (bias != nullptr) value += bias->get(j * bias->strides[0]);
        out[static_cast<std::size_t>((bi * m + i) * n + j)] = activation_ref(attrs.act, value);
      }
    }
  }
  return out;
}

double relative_error(const HostTensor& out, const std::vector<double>& ref,
                      const std::vector<double>* scale) {
  const std::int64_t batch = out.rank == 3 ? out.shape[0] : 1;
  const std::int64_t rows = out.shape[out.rank - 2], cols = out.shape[out.rank - 1];
  double diff = 0, norm = 0;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        const double got = out.get(out.offset(b, i, j));
        const double want = ref[static_cast<std::size_t>((b * rows + i) * cols + j)];
        if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
        diff += (got - want) * (got - want);
        norm += want * want;
      }
  // A reference whose RMS is below 1e-6 (a single element that an activation
  // drove to ~1e-35, say) is below what fp32 arithmetic resolves for O(1)
  // data: the error is then measured against that floor, not against zero.
  const double count = static_cast<double>(batch * rows * cols);
  double scale_norm = 0;
  if (scale != nullptr)
    for (const double v : *scale) scale_norm += v * v;
  return std::sqrt(diff) /
         std::max({std::sqrt(norm), std::sqrt(scale_norm), 1e-6 * std::sqrt(count)});
}

double tolerance(ge2_dtype_t dtype) {
  switch (dtype) {
    case GE2_DTYPE_F16:
      return 2e-3;  // output rounding 2^-11 dominates with fp32 accumulation
    case GE2_DTYPE_BF16:
      return 1e-2;  // output rounding 2^-8
    case GE2_DTYPE_F32:
      return 1e-5;
    case GE2_DTYPE_MAX_ENUM:
      break;
  }
  return 0;  // not a dtype: no output can meet it
}

}  // namespace ge2::test
