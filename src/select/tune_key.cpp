#include "select/tune_key.hpp"

#include <fmt/format.h>

#include "select/selector.hpp"

namespace ge2 {
namespace {

// The operation cuBLASLt actually sees: a column-major stored operand flips the transpose.
char effective_op(const MatrixView& v, bool transposed) {
  const bool column_major = v.col_stride != 1 && v.row_stride == 1;
  return (transposed != column_major) ? 'T' : 'N';
}

}  // namespace

std::string device_key(const DeviceInfo& device) {
  return fmt::format("{}|sm{}{}|{}", device.name, device.cc_major, device.cc_minor,
                     device.sm_count);
}

TuneKey make_tune_key(const GemmProblem& p, KernelId kernel, const DeviceInfo& device) {
  TuneKey key;
  key.device = device_key(device);
  key.cublaslt_version = static_cast<std::int64_t>(device.cublaslt_version);
  key.kernel = std::string(kernel_name(kernel));
  key.signature =
      fmt::format("{} op={}{} bias={} act={} c={} align={}", dtype_name(p.dtype),
                  effective_op(p.a, p.trans_a), effective_op(p.b, p.trans_b), p.has_bias ? 1 : 0,
                  activation_name(p.act), p.has_c ? 1 : 0, layout_alignment_bytes(p));
  // A gated unit's time (the multiply in the GEMM's epilogue) is not the plain GEMM's.
  if (p.gated) key.signature += fmt::format(" gated={}", activation_name(p.gated->act));
  key.m = p.m;
  key.n = p.n;
  key.k = p.k;
  key.batch = p.batch;
  return key;
}

}  // namespace ge2
