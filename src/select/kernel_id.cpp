#include "select/kernel_id.hpp"

namespace ge2 {

std::string_view kernel_name(KernelId id) {
  switch (id) {
    case KernelId::LtF16:
      return "lt_f16";
    case KernelId::LtBf16:
      return "lt_bf16";
    case KernelId::LtTf32:
      return "lt_tf32";
    case KernelId::LtF32:
      return "lt_f32";
    case KernelId::CudaF32:
      return "cuda_f32";
    case KernelId::CpuRef:
      return "cpu_ref";
  }
  return "?";
}

std::optional<KernelId> kernel_from_name(std::string_view name) {
  for (KernelId id : kAllKernels)
    if (kernel_name(id) == name) return id;
  return std::nullopt;
}

bool is_cublaslt_kernel(KernelId id) {
  return id == KernelId::LtF16 || id == KernelId::LtBf16 || id == KernelId::LtTf32 ||
         id == KernelId::LtF32;
}

}  // namespace ge2
