// CUTLASS 3.x sm90a GEMMs with ge2's epilogues: the TMA warp-specialized
// mainloop built by CollectiveBuilder with either the LinCombPerColBiasEltAct
// epilogue fusion, D = act(alpha * acc + beta * C + bias), or the gated epilogue
// (gated_epilogue.cuh). An instance file picks the element type, the tile
// configuration and the epilogue.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <cstdint>
#include <mutex>
#include <type_traits>

#include "backends/cuda/cutlass/gated_epilogue.cuh"
#include "backends/cuda/cutlass/gemm_launcher.hpp"
#include "backends/cuda/cutlass/runtime_activation.cuh"

namespace ge2::cuda::cutlass_kernels {

// Large problems: two consumer warp groups share a 128x256 tile, clusters of two
// CTAs along M share B's tiles through TMA multicast.
struct Cooperative128x256 {
  using Tile = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Mainloop = ::cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = ::cutlass::epilogue::TmaWarpSpecializedCooperative;
  static constexpr const char* kName = "cooperative 128x256x64, cluster 2x1";
};
// Small M or N: two consumer warp groups alternate on 64x128 tiles, one's
// epilogue overlapping the other's mainloop.
struct Pingpong64x128 {
  using Tile = cute::Shape<cute::_64, cute::_128, cute::_64>;
  using Cluster = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using Mainloop = ::cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = ::cutlass::epilogue::TmaWarpSpecialized;
  static constexpr const char* kName = "ping-pong 64x128x64, cluster 1x1";
};

// Large problems with a costly epilogue: ping-pong on 128x128 tiles hides one
// warp group's epilogue (erf GELU, SiLU) under the other's mainloop.
struct Pingpong128x128 {
  using Tile = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Mainloop = ::cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = ::cutlass::epilogue::TmaWarpSpecialized;
  static constexpr const char* kName = "ping-pong 128x128x64, cluster 2x1";
};

// GemmArgs' tile walk in the persistent scheduler's arguments.
template <typename SchedulerArguments>
void set_tile_walk(SchedulerArguments& scheduler, const GemmArgs& g) {
  using Raster = decltype(scheduler.raster_order);
  scheduler.max_swizzle_size = g.max_swizzle;
  scheduler.raster_order = g.raster == TileRaster::AlongM   ? Raster::AlongM
                           : g.raster == TileRaster::AlongN ? Raster::AlongN
                                                            : Raster::Heuristic;
}

template <typename Functor, typename = void>
struct TakesActivationArgument : std::false_type {};
template <typename Functor>
struct TakesActivationArgument<Functor, std::void_t<typename Functor::Arguments>> : std::true_type {
};

// The kernel-parameter cache and launch every instance shares. Types supplies
// the CUTLASS device adapter (Types::Gemm), the GemmArgs -> Gemm::Arguments
// conversion and the configuration's name.
template <typename Types>
class CachedLauncher final : public GemmLauncher {
  using Gemm = typename Types::Gemm;

 public:
  std::string check(const GemmArgs& args) const override {
    const auto arguments = Types::to_arguments(args);
    const ::cutlass::Status status = Gemm::can_implement(arguments);
    if (status == ::cutlass::Status::kSuccess) return "";
    return std::string("CUTLASS cannot implement it: ") + ::cutlass::cutlassGetStatusString(status);
  }

  std::string launch(const GemmArgs& args, void* workspace, std::size_t workspace_bytes,
                     cudaStream_t stream) override {
    // Steps of one plan may run on several threads at once; the kernel
    // parameters live in gemm_ until the launch has copied them.
    std::lock_guard lock(mutex_);
    // The parameters hold the workspace pointer too (another stream, another workspace).
    if (!initialized_ || !same_arguments(args, last_) || workspace != last_workspace_) {
      const auto arguments = Types::to_arguments(args);
      if (Gemm::get_workspace_size(arguments) > workspace_bytes)
        return "the CUTLASS kernel needs more workspace than the stream's";
      const ::cutlass::Status status = gemm_.initialize(arguments, workspace, stream);
      if (status != ::cutlass::Status::kSuccess) {
        initialized_ = false;
        return std::string("CUTLASS initialize: ") + ::cutlass::cutlassGetStatusString(status);
      }
      last_ = args;
      last_workspace_ = workspace;
      initialized_ = true;
    }
    const ::cutlass::Status status = gemm_.run(stream);
    if (status != ::cutlass::Status::kSuccess)
      return std::string("CUTLASS launch: ") + ::cutlass::cutlassGetStatusString(status) + " (" +
             cudaGetErrorString(cudaGetLastError()) + ")";
    return "";
  }

  std::string configuration() const override { return Types::configuration(); }
  TileShape tile() const override {
    using Config = typename Types::Config;
    return {int(cute::size<0>(typename Config::Tile{})),
            int(cute::size<1>(typename Config::Tile{})),
            int(cute::size<0>(typename Config::Cluster{})),
            int(cute::size<1>(typename Config::Cluster{}))};
  }

 private:
  Gemm gemm_;
  GemmArgs last_;
  void* last_workspace_ = nullptr;
  bool initialized_ = false;
  std::mutex mutex_;
};

// The TMA warp-specialized mainloop of a configuration, with shared memory
// carved out for `EpilogueStorage`: A row-major, B as [N, K] (K contiguous).
template <typename Element, typename Config, typename EpilogueStorage>
using Mainloop = typename ::cutlass::gemm::collective::CollectiveBuilder<
    ::cutlass::arch::Sm90, ::cutlass::arch::OpClassTensorOp, Element, ::cutlass::layout::RowMajor,
    16 / sizeof(Element), Element, ::cutlass::layout::ColumnMajor, 16 / sizeof(Element), float,
    typename Config::Tile, typename Config::Cluster,
    ::cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(EpilogueStorage))>,
    typename Config::Mainloop>::CollectiveOp;

// D = act(alpha * A B^T + beta * C + bias). Activation: RuntimeActivation (the
// activation is a kernel argument) or CompiledActivation<F>::Fn (one functor
// compiled into the epilogue).
template <typename Element, typename Config_, template <class> class Activation>
struct FusedGemmTypes {
  using Config = Config_;
  static constexpr bool kRuntimeActivation = TakesActivationArgument<Activation<float>>::value;
  static constexpr int kAlignment = 16 / sizeof(Element);
  using RowMajor = ::cutlass::layout::RowMajor;
  using Fusion = ::cutlass::epilogue::fusion::LinCombPerColBiasEltAct<Activation, Element, float,
                                                                      Element, Element, float>;
  using CollectiveEpilogue = typename ::cutlass::epilogue::collective::CollectiveBuilder<
      ::cutlass::arch::Sm90, ::cutlass::arch::OpClassTensorOp, typename Config::Tile,
      typename Config::Cluster, ::cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      Element, RowMajor, kAlignment, Element, RowMajor, kAlignment, typename Config::Epilogue,
      Fusion>::CollectiveOp;
  using Kernel = ::cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>,
      Mainloop<Element, Config, typename CollectiveEpilogue::SharedStorage>, CollectiveEpilogue>;
  using Gemm = ::cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments to_arguments(const GemmArgs& g) {
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    using StrideC = typename Gemm::GemmKernel::StrideC;
    using StrideD = typename Gemm::GemmKernel::StrideD;
    StrideA stride_a{g.lda, cute::Int<1>{}, g.batch_stride_a};
    StrideB stride_b{g.ldb, cute::Int<1>{}, g.batch_stride_b};
    StrideC stride_c{g.ldc, cute::Int<1>{}, g.batch_stride_c};
    StrideD stride_d{g.ldd, cute::Int<1>{}, g.batch_stride_d};
    // Without C, D stands in for it: beta is 0, so it is never read.
    const bool has_c = g.c != nullptr && g.beta != 0.0f;
    typename Gemm::Arguments arguments{
        ::cutlass::gemm::GemmUniversalMode::kGemm,
        {g.m, g.n, g.k, g.batch},
        {static_cast<const Element*>(g.a), stride_a, static_cast<const Element*>(g.b), stride_b},
        {{},
         static_cast<const Element*>(has_c ? g.c : g.d),
         has_c ? stride_c : stride_d,
         static_cast<Element*>(g.d),
         stride_d},
        ::cutlass::KernelHardwareInfo{g.device, g.sm_count}};
    auto& epilogue = arguments.epilogue.thread;
    epilogue.alpha = g.alpha;
    epilogue.beta = has_c ? g.beta : 0.0f;
    epilogue.bias_ptr = static_cast<const Element*>(g.bias);
    if constexpr (kRuntimeActivation) epilogue.activation.activation = g.activation;
    set_tile_walk(arguments.scheduler, g);
    return arguments;
  }

  static std::string configuration() {
    return std::string(Config::kName) + (kRuntimeActivation ? "" : ", activation compiled in");
  }
};

template <typename Element, typename Config, template <class> class Activation = RuntimeActivation>
using CutlassGemm = CachedLauncher<FusedGemmTypes<Element, Config, Activation>>;

// The gated form (gated_epilogue.cuh): g.n is the accumulator's width (gate
// and up interleaved), D is [M, n / 2]; no C.
template <typename Element, typename Config_>
struct GatedGemmTypes {
  using Config = Config_;
  using CollectiveEpilogue = ::cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      GatedEpilogue<Element>>;
  using Kernel = ::cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>,
      Mainloop<Element, Config, typename GatedEpilogue<Element>::SharedStorage>,
      CollectiveEpilogue>;
  using Gemm = ::cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments to_arguments(const GemmArgs& g) {
    typename Gemm::GemmKernel::StrideA stride_a{g.lda, cute::Int<1>{}, g.batch_stride_a};
    typename Gemm::GemmKernel::StrideB stride_b{g.ldb, cute::Int<1>{}, g.batch_stride_b};
    typename GatedEpilogue<Element>::Arguments epilogue;
    epilogue.d = static_cast<Element*>(g.d);
    epilogue.ldd = g.ldd;
    epilogue.batch_stride_d = g.batch_stride_d;
    epilogue.bias = static_cast<const Element*>(g.bias);
    epilogue.alpha = g.alpha;
    epilogue.activation = g.activation;
    typename Gemm::Arguments arguments{
        ::cutlass::gemm::GemmUniversalMode::kGemm,
        {g.m, g.n, g.k, g.batch},
        {static_cast<const Element*>(g.a), stride_a, static_cast<const Element*>(g.b), stride_b},
        epilogue,
        ::cutlass::KernelHardwareInfo{g.device, g.sm_count}};
    set_tile_walk(arguments.scheduler, g);
    return arguments;
  }

  static std::string configuration() { return std::string(Config::kName) + ", gated epilogue"; }
};

template <typename Element, typename Config>
using CutlassGatedGemm = CachedLauncher<GatedGemmTypes<Element, Config>>;

}  // namespace ge2::cuda::cutlass_kernels
