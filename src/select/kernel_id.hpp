// The kernels a GEMM node can run on; names are stable and appear in plans,
// the tuning database and GE2_FORCE_KERNEL.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace ge2 {

enum class KernelId { LtF16, LtBf16, LtTf32, LtF32, CudaF32, CpuRef };

inline constexpr std::array<KernelId, 6> kAllKernels{KernelId::LtF16,   KernelId::LtBf16,
                                                     KernelId::LtTf32,  KernelId::LtF32,
                                                     KernelId::CudaF32, KernelId::CpuRef};

std::string_view kernel_name(KernelId id);
std::optional<KernelId> kernel_from_name(std::string_view name);
bool is_cublaslt_kernel(KernelId id);

}  // namespace ge2
