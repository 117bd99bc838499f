#include "select/kernel_id.hpp"

namespace ge2 {

std::optional<KernelId> kernel_from_name(std::string_view name) {
  for (const KernelInfo& kernel : kKernels)
    if (kernel.name == name) return kernel.id;
  return std::nullopt;
}

}  // namespace ge2
