#include "backends/cpu/cpu_kernels.hpp"

#include <cmath>
#include <vector>

#include "core/activation.hpp"
#include "core/error.hpp"
#include "select/selector.hpp"

namespace ge2::cpu {
namespace {

// Copies op(matrix) of one batch into a dense row-major float buffer [rows x cols].
void pack(const MatrixView& v, bool transposed, DType dtype, const void* base,
          std::int64_t batch_index, std::vector<float>& out) {
  const std::int64_t rows = transposed ? v.cols : v.rows;
  const std::int64_t cols = transposed ? v.rows : v.cols;
  out.resize(static_cast<std::size_t>(rows * cols));
  const std::int64_t origin = batch_index * v.batch_stride;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t stored_row = transposed ? j : i;
      const std::int64_t stored_col = transposed ? i : j;
      out[static_cast<std::size_t>(i * cols + j)] = load_as_float(
          base, dtype, origin + stored_row * v.row_stride + stored_col * v.col_stride);
    }
  }
}

// Rounds every value to e4m3 through the per-tensor scale (the device's
// fp8_quantize.cu arithmetic): x * 448 / amax, saturating; returns amax / 448.
float round_to_e4m3(std::vector<float>& values) {
  float amax = 0.0f;
  for (float v : values) {
    const float magnitude = std::fabs(v);
    if (std::isnan(magnitude) || magnitude > amax) amax = magnitude;
    if (std::isnan(amax)) break;
  }
  const float multiplier = e4m3_multiplier(amax);
  for (float& v : values) v = e4m3_bits_to_float(float_to_e4m3_bits(v * multiplier));
  return e4m3_scale(amax);
}

// out[batch, i, :] = act(gate) * up for the row's values [gate | up].
void store_gated_row(const GatedOutput& gated, const std::vector<float>& row, std::int64_t batch,
                     std::int64_t i, DType dtype, void* out) {
  const MatrixView& o = gated.out;
  const std::int64_t half = o.cols;
  visit_activation(gated.act, [&](auto act) {
    for (std::int64_t j = 0; j < half; ++j)
      store_from_float(out, dtype, batch * o.batch_stride + i * o.row_stride + j * o.col_stride,
                       gated_product(act, row[static_cast<std::size_t>(j)],
                                     row[static_cast<std::size_t>(half + j)]));
  });
}

void gemm_impl(const GemmProblem& p, const void* a, const void* b, const void* c, const void* bias,
               void* d, bool fp8) {
  std::vector<float> packed_a, packed_b, row(static_cast<std::size_t>(p.n));
  for (std::int64_t batch = 0; batch < p.batch; ++batch) {
    pack(p.a, p.trans_a, p.dtype, a, batch, packed_a);
    pack(p.b, p.trans_b, p.dtype, b, batch, packed_b);
    const float scale = fp8 ? round_to_e4m3(packed_a) * round_to_e4m3(packed_b) : 1.0f;
    for (std::int64_t i = 0; i < p.m; ++i) {
      std::fill(row.begin(), row.end(), 0.0f);
      const float* a_row = packed_a.data() + i * p.k;
      // i-k-j order keeps the inner loop contiguous in B and the accumulator.
      for (std::int64_t kk = 0; kk < p.k; ++kk) {
        const float a_ik = a_row[kk];
        const float* b_row = packed_b.data() + kk * p.n;
        for (std::int64_t j = 0; j < p.n; ++j) row[static_cast<std::size_t>(j)] += a_ik * b_row[j];
      }
      for (std::int64_t j = 0; j < p.n; ++j) {
        float& value = row[static_cast<std::size_t>(j)];
        value *= p.alpha * scale;
        if (p.has_c)
          value += p.beta * load_as_float(
                                c, p.dtype,
                                batch * p.c.batch_stride + i * p.c.row_stride + j * p.c.col_stride);
        if (p.has_bias) value += load_as_float(bias, p.dtype, j * p.bias_stride);
        if (!p.gated)
          store_from_float(d, p.dtype,
                           batch * p.d.batch_stride + i * p.d.row_stride + j * p.d.col_stride,
                           apply_activation(p.act, value));
      }
      if (p.gated) store_gated_row(*p.gated, row, batch, i, p.dtype, d);
    }
  }
}

}  // namespace

void gemm(const GemmProblem& p, const void* a, const void* b, const void* c, const void* bias,
          void* d) {
  gemm_impl(p, a, b, c, bias, d, false);
}

void gemm_fp8(const GemmProblem& p, const void* a, const void* b, const void* c, const void* bias,
              void* d) {
  // One scale per tensor: a batch that folds into M is one tensor, as on the device.
  const GemmProblem folded = fold_batch_into_m(p);
  require(folded.batch == 1, GE2_ERROR_UNSUPPORTED, "cpu_fp8_ref: {}", fp8_layout_problem(p));
  gemm_impl(folded, a, b, c, bias, d, true);
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
