// out = act(combine(x_act(x), y) + bias): a strided kernel for any layout, a
// row kernel (16-byte loads and stores) for row-contiguous, aligned tensors —
// the gated pass over the two halves of a [gate | up] GEMM result takes it —
// and a flat one for dense tensors, which the erf-GELU pass after a cuBLASLt
// GEMM takes.
#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_errors.hpp"
#include "backends/cuda/dependent_launch.cuh"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/dtype_dispatch.cuh"
#include "backends/cuda/elementwise_flat.cuh"
#include "backends/cuda/kernels.hpp"
#include "backends/cuda/launch_geometry.cuh"

namespace ge2::cuda {
namespace {

struct ElementwiseParams {
  const void* x;
  const void* bias;
  void* out;
  long long batch, rows, cols;
  long long x_bs, x_rs, x_cs;
  long long o_bs, o_rs, o_cs;
  long long bias_stride;
  int act;
  int has_bias;
  const void* y;  // with combine != 0 only
  long long y_bs, y_rs, y_cs;
  int combine;  // 0 none, 1 add, 2 multiply
  int x_act;    // with combine: applied to x first
};

template <typename T>
__global__ void elementwise_strided(ElementwiseParams p) {
  wait_for_producer();
  const RuntimeOp op{p.combine, p.x_act, p.act};
  const long long total = p.batch * p.rows * p.cols;
  const T* x = static_cast<const T*>(p.x);
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.out);
  for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long j = idx % p.cols;
    const long long i = (idx / p.cols) % p.rows;
    const long long z = idx / (p.cols * p.rows);
    const float y = op.reads_y()
                        ? to_float(static_cast<const T*>(p.y)[z * p.y_bs + i * p.y_rs + j * p.y_cs])
                        : 0.0f;
    float v = op.combine(to_float(x[z * p.x_bs + i * p.x_rs + j * p.x_cs]), y);
    if (p.has_bias) v += to_float(bias[j * p.bias_stride]);
    out[z * p.o_bs + i * p.o_rs + j * p.o_cs] = from_float<T>(op.finish(v));
  }
}

// A 2-D grid for row-contiguous tensors (a gated pass reads the two halves of
// one wider row; y may also be broadcast over rows): y strides over groups of
// kRows rows, x over the 16-byte vectors of a row, so no thread divides per
// element. Each thread issues the loads of all kRows rows before it computes:
// a pass this light is bound by the bytes in flight.
template <typename T, int kRows, typename Op>
__global__ void __launch_bounds__(256) elementwise_rows(ElementwiseParams p, Op op) {
  wait_for_producer();
  constexpr int kVec = 16 / sizeof(T);
  const long long vectors_per_row = p.cols / kVec;
  const long long rows_total = p.batch * p.rows;
  const T* bias = static_cast<const T*>(p.bias);
  for (long long first_row = static_cast<long long>(blockIdx.y) * kRows; first_row < rows_total;
       first_row += static_cast<long long>(gridDim.y) * kRows) {
    long long x_at[kRows], y_at[kRows], out_at[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const long long row = first_row + r;
      const long long z = row / p.rows, i = row - z * p.rows;
      x_at[r] = z * p.x_bs + i * p.x_rs;
      y_at[r] = z * p.y_bs + i * p.y_rs;
      out_at[r] = z * p.o_bs + i * p.o_rs;
    }
    for (long long vj = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
         vj < vectors_per_row; vj += static_cast<long long>(gridDim.x) * blockDim.x) {
      uint4 in[kRows], other[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (first_row + r >= rows_total) continue;
        in[r] = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + x_at[r] + vj * kVec);
        other[r] =
            op.reads_y()
                ? *reinterpret_cast<const uint4*>(static_cast<const T*>(p.y) + y_at[r] + vj * kVec)
                : uint4{};
      }
      uint4 bias_packed{};
      if (p.has_bias) bias_packed = *reinterpret_cast<const uint4*>(bias + vj * kVec);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (first_row + r >= rows_total) continue;
        *reinterpret_cast<uint4*>(static_cast<T*>(p.out) + out_at[r] + vj * kVec) =
            apply_vector<T>(op, in[r], other[r], p.has_bias, bias_packed);
      }
    }
  }
}

// launch(op) with the op of p: a FixedOp for the common passes, else a RuntimeOp.
template <typename Launch>
void with_op(const ElementwiseParams& p, Launch&& launch) {
  const auto act = static_cast<Activation>(p.act), x_act = static_cast<Activation>(p.x_act);
  if (p.combine == 0) {
    visit_activation(act, [&](auto a) { launch(FixedOp<Identity, 0, decltype(a)>{}); });
  } else if (p.combine == 2 && act == Activation::None) {
    visit_activation(x_act, [&](auto a) { launch(FixedOp<decltype(a), 2, Identity>{}); });
  } else if (p.combine == 1 && act == Activation::None && x_act == Activation::None) {
    launch(FixedOp<Identity, 1, Identity>{});
  } else {
    launch(RuntimeOp{p.combine, p.x_act, p.act});
  }
}

// Dense x and out: blocks of 128 threads with one 16-byte vector each, as many
// blocks as the tensor needs, so that blocks at different stages overlap their
// loads, math and stores. Run 22 (H100, bench/elementwise_probe.cu) timed twelve
// geometries on the in-place erf-GELU pass over 16-4096 x 11008: from 512 rows
// this one was within 0.5 us of the fastest, warm in L2 or cold (at 16 rows all
// took 4-5 us, launch-bound). The former 256 threads x 4 vectors put a 512-row
// pass into less than one wave of large blocks: 8.6 against 7.8 us warm, 11.4
// against 10.7 cold.
using FlatConfig = flat::Config<128, 1>;

template <typename T>
void launch_typed(const ElementwiseParams& p, bool vectorise, bool dense, int sm_count,
                  cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (vectorise && dense) {
    const long long per_row = p.cols / (16 / static_cast<long long>(sizeof(T)));
    const flat::Params fp{
        p.x, p.y, p.bias, p.out, p.batch * p.rows * per_row, per_row, p.has_bias != 0};
    with_op(p,
            [&](auto op) { GE2_CUDA_CHECK((flat::launch<T, FlatConfig>(fp, op, stream, true))); });
    return;
  }
  if (vectorise) {
    const long long vectors = p.cols / (16 / static_cast<long long>(sizeof(T)));
    const long long rows = p.batch * p.rows;
    // Four rows per thread once there are rows enough to fill the chip that way.
    with_op(p, [&](auto op) {
      if (rows >= 4LL * sm_count) {
        constexpr int kRows = 4;
        GE2_CUDA_CHECK(launch_dependent(true, elementwise_rows<T, kRows, decltype(op)>,
                                        grid_2d((rows + kRows - 1) / kRows, vectors, kThreads),
                                        dim3(kThreads), 0, stream, p, op));
      } else {
        GE2_CUDA_CHECK(launch_dependent(true, elementwise_rows<T, 1, decltype(op)>,
                                        grid_2d(rows, vectors, kThreads), dim3(kThreads), 0, stream,
                                        p, op));
      }
    });
    return;
  }
  const long long work = p.batch * p.rows * p.cols;
  // Enough blocks to fill the chip several times; the loops stride over the rest.
  const unsigned blocks = static_cast<unsigned>(std::max<long long>(
      1, std::min<long long>((work + kThreads - 1) / kThreads, 16LL * std::max(1, sm_count))));
  GE2_CUDA_CHECK(
      launch_dependent(true, elementwise_strided<T>, dim3(blocks), dim3(kThreads), 0, stream, p));
}

}  // namespace

void launch_elementwise(const ElementwiseProblem& pr, const void* x, const void* bias, void* out,
                        int sm_count, cudaStream_t stream, const void* y) {
  const MatrixView xv = matrix_view(pr.x), ov = matrix_view(pr.out);
  const bool combine = pr.combine != Combine::None;
  const MatrixView yv = combine ? matrix_view(pr.y) : MatrixView{};
  ElementwiseParams p{x,
                      bias,
                      out,
                      xv.batch,
                      xv.rows,
                      xv.cols,
                      xv.batch_stride,
                      xv.row_stride,
                      xv.col_stride,
                      ov.batch_stride,
                      ov.row_stride,
                      ov.col_stride,
                      pr.bias_stride,
                      static_cast<int>(pr.act),
                      pr.has_bias,
                      y,
                      yv.batch_stride,
                      yv.row_stride,
                      yv.col_stride,
                      pr.combine == Combine::Add   ? 1
                      : pr.combine == Combine::Mul ? 2
                                                   : 0,
                      static_cast<int>(pr.x_act)};
  const long long vec = 16 / static_cast<long long>(dtype_size(pr.x.dtype));
  auto dense = [](const MatrixView& v) {
    return v.col_stride == 1 && v.row_stride == v.cols &&
           (v.batch <= 1 || v.batch_stride == v.rows * v.cols);
  };
  // y rides along on the row kernel when its rows are 16-byte vectors (it may
  // be broadcast over rows or batches: stride 0), and on the flat kernel only
  // when it is laid out exactly like a dense x.
  const bool y_rows = !combine || (yv.col_stride == 1 && yv.row_stride % vec == 0 &&
                                   yv.batch_stride % vec == 0 && misalignment_bytes(y) == 0);
  const bool y_like_x = !combine || (yv.row_stride == xv.row_stride &&
                                     (xv.batch <= 1 || yv.batch_stride == xv.batch_stride));
  const bool vectorise = y_rows && xv.col_stride == 1 && ov.col_stride == 1 && xv.cols % vec == 0 &&
                         xv.row_stride % vec == 0 && ov.row_stride % vec == 0 &&
                         xv.batch_stride % vec == 0 && ov.batch_stride % vec == 0 &&
                         misalignment_bytes(x) == 0 && misalignment_bytes(out) == 0 &&
                         (!pr.has_bias || (pr.bias_stride == 1 && misalignment_bytes(bias) == 0));
  const bool flat = dense(xv) && dense(ov) && y_like_x;
  with_cuda_type(pr.x.dtype, [&](auto row) {
    using T = typename decltype(row)::type;
    launch_typed<T>(p, vectorise, flat, sm_count, stream);
  });
}

}  // namespace ge2::cuda
