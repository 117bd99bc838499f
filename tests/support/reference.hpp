// Test oracle: typed host tensors, fresh random data, poisoning, an fp64
// reference GEMM with bias/activation, and the relative Frobenius error.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "ge_v2_api.h"

namespace ge2::test {

// A host tensor of any dtype, stored as raw bytes, with element strides.
struct HostTensor {
  ge2_dtype_t dtype = GE2_DTYPE_F32;
  int rank = 2;
  std::int64_t shape[3] = {0, 0, 0};
  std::int64_t strides[3] = {0, 0, 0};
  std::vector<unsigned char> bytes;

  std::size_t element_size() const { return dtype == GE2_DTYPE_F32 ? 4 : 2; }
  std::int64_t span() const;
  std::int64_t offset(std::int64_t b, std::int64_t i, std::int64_t j) const;  // rank 2/3
  double get(std::int64_t offset_elements) const;
  void set(std::int64_t offset_elements, double value);
  ge2_tensor_desc_t desc() const;
  void* data() { return bytes.data(); }
};

// Dense row-major unless `strides` is given; the padding between rows is filled too.
HostTensor make_tensor(ge2_dtype_t dtype, std::vector<std::int64_t> shape,
                       std::vector<std::int64_t> strides = {});
std::mt19937_64& rng();  // seeded from the clock; the seed is printed once
void fill_random(HostTensor& t, double low = -1.0, double high = 1.0);
// NaN in every element slot (also the padding), so unwritten outputs fail the check.
void poison(HostTensor& t);

double activation_ref(ge2_activation_t act, double x);

// Element (r, c), r < rows, c < cols, of batch `batch` of a rank-2/3 tensor (of its
// transpose where `transposed`), as a dense row-major array of doubles.
std::vector<double> dense_values(const HostTensor& t, std::int64_t batch, bool transposed,
                                 std::int64_t rows, std::int64_t cols);

struct GemmRef {
  bool trans_a = false, trans_b = false;
  double alpha = 1.0, beta = 0.0;
  ge2_activation_t act = GE2_ACT_NONE;
};
// fp64 act(alpha*op(A)op(B) + beta*C + bias) into a dense [batch, M, N] vector.
std::vector<double> gemm_reference(const HostTensor& a, const HostTensor& b, const HostTensor* c,
                                   const HostTensor* bias, const GemmRef& attrs);

// ||out - ref|| / max(||ref||, ||scale||, 1e-6 sqrt(n)) over the n logical
// elements of `out`; +inf if any is NaN or infinite. `scale`, when given, is the
// reference before its activation: fp32 evaluates act(x) with an error that
// grows with |x|, not with |act(x)| (GELU of -4 is -1e-4 from 1 + tanh(...)
// ~ 3e-5), so an output the activation squeezed is judged against its input.
double relative_error(const HostTensor& out, const std::vector<double>& ref,
                      const std::vector<double>* scale = nullptr);

// The bound a GEMM in `dtype` with fp32 accumulation must meet on the CPU.
double tolerance(ge2_dtype_t dtype);

}  // namespace ge2::test
