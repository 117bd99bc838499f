// The gated (GLU) epilogue of a GEMM whose B holds the gate and up weights
// interleaved in blocks of eight rows (rows 16j..16j+7 gate rows 8j..8j+7,
// rows 16j+8..16j+15 the up rows; the bias likewise):
//
//     D[m, 8j + q] = act(alpha * acc[m, 16j + q] + bias[16j + q])
//                    * (alpha * acc[m, 16j + 8 + q] + bias[16j + 8 + q])
//
// so D is half as wide as the accumulator tile. In Hopper's wgmma accumulator
// fragments (the SM90 64xNx16 f32 C layouts) each thread holds, per group of
// eight consecutive values, the column pair (2t, 2t+1) of two rows in two
// adjacent eight-column chunks: the gate pair of a block and its up pair. So
// each thread owns whole (gate, up) pairs, nothing moves between threads, and
// the epilogue stores two adjacent outputs (four bytes) per row straight from
// registers (CUTLASS's "no shared memory" epilogue interface, wrapped for the
// warp-specialized kernels by Sm90TmaWarpSpecializedAdapter), predicated on
// the problem's bounds. The formula is core/activation.hpp's gated_product.
#pragma once

#include <cutlass/array.h>
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>

#include <cstdint>

#include "core/activation.hpp"

namespace ge2::cuda::cutlass_kernels {

template <typename Element>
class GatedEpilogue {
 public:
  using EpilogueSchedule = ::cutlass::gemm::EpilogueDefault;
  using DispatchPolicy = EpilogueSchedule;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementOutput = Element;
  using ElementC = Element;  // never read: the gated form has no C operand
  using ElementD = Element;
  using StrideC = cute::Stride<std::int64_t, cute::Int<1>, std::int64_t>;
  using StrideD = StrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  // What GemmUniversalAdapter names as the epilogue's thread-level operator: this one.
  using ThreadEpilogueOp = GatedEpilogue;

  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  struct Arguments {
    Element* d = nullptr;  // [M, N / 2] per batch, row-major, 4-byte aligned
    std::int64_t ldd = 0, batch_stride_d = 0;
    const Element* bias = nullptr;  // [N], interleaved like B's rows; nullptr: none
    float alpha = 1.0f;
    int activation = 0;  // a ge2::Activation value, applied to the gate
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                  void*) {
    return args;
  }
  template <class ProblemShape>
  static std::size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static ::cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                                cudaStream_t,
                                                ::cutlass::CudaHostAdapter* = nullptr) {
    return ::cutlass::Status::kSuccess;
  }
  // The accumulator's columns come in blocks of eight gate and eight up columns,
  // and D's rows start on 4-byte boundaries.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    return cute::get<1>(problem_shape) % 16 == 0 && args.ldd % 2 == 0 &&
           args.batch_stride_d % 2 == 0;
  }

  CUTLASS_HOST_DEVICE explicit GatedEpilogue(Params const& params,
                                             SharedStorage const& = SharedStorage())
      : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<FrgLayout>::value, "the accumulator layout must be static");
    static_assert(size(FrgLayout{}) % 8 == 0, "accumulators come in groups of eight");
    const auto m_total = get<0>(problem_shape_mnkl);
    const auto n_total = get<1>(problem_shape_mnkl);
    const auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    // The problem coordinate of each of this thread's accumulators.
    Tensor tile_coords = local_tile(make_identity_tensor(make_shape(m_total, n_total)),
                                    take<0, 2>(blk_shape_mnk), make_coord(m_coord, n_coord));
    Tensor thread_coords = tiled_mma.get_thread_slice(thread_idx).partition_C(tile_coords);
    Element* d = params_.d + static_cast<std::int64_t>(l_coord) * params_.batch_stride_d;
    const Element* bias = params_.bias;
    const float alpha = params_.alpha;
    const std::int64_t ldd = params_.ldd;
    // One switch per tile, outside the loop.
    visit_activation(static_cast<Activation>(params_.activation), [&](auto act) {
      CUTLASS_PRAGMA_UNROLL
      for (int group = 0; group < size(accumulators); group += 8) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = group; i < group + 4; i += 2) {  // row r, then row r + 8
          const auto gate_at = thread_coords(i);
          const auto up_at = thread_coords(i + 4);
          const int m = get<0>(gate_at), n = get<1>(gate_at);
          // The layout this relies on; another one writes nothing (and tests fail).
          if (get<0>(up_at) != m || get<1>(up_at) != n + 8 || n % 16 >= 8) continue;
          if (m >= m_total || n >= n_total) continue;
          float value[2];
          CUTLASS_PRAGMA_UNROLL
          for (int c = 0; c < 2; ++c) {
            float gate = alpha * static_cast<float>(accumulators(i + c));
            float up = alpha * static_cast<float>(accumulators(i + 4 + c));
            if (bias != nullptr) {
              gate += static_cast<float>(bias[n + c]);
              up += static_cast<float>(bias[n + 8 + c]);
            }
            value[c] = gated_product(act, gate, up);
          }
          // n is even and D's rows hold an even number of elements: one 4-byte store.
          ::cutlass::Array<Element, 2> pair;
          pair[0] = Element(value[0]);
          pair[1] = Element(value[1]);
          *reinterpret_cast<::cutlass::Array<Element, 2>*>(d + m * ldd + (n / 16) * 8 + n % 8) =
              pair;
        }
      }
    });
  }

 private:
  Params params_;
};

}  // namespace ge2::cuda::cutlass_kernels
