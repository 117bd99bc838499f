// Linked into CPU-only builds (GE2_WITH_CUDA=OFF): there is never a CUDA backend.
#include "core/error.hpp"
#include "exec/backend.hpp"

namespace ge2 {

bool cuda_backend_available() { return false; }
bool cuda_backend_built() { return false; }

std::unique_ptr<Backend> make_cuda_backend(int, ge2_tune_mode_t, const std::string&,
                                           const Logger&) {
  fail(GE2_ERROR_NO_DEVICE,
       "ge2_context_create: argument 'options->device' = GE2_DEVICE_CUDA, but this libge2 was "
       "built without CUDA (GE2_WITH_CUDA=OFF)");
}

}  // namespace ge2
