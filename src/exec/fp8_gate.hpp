// The FP8 precision policy's accuracy gate: before a plan keeps an FP8 kernel for
// a GEMM, the kernel runs once beside the 16-bit kernel the selector would
// otherwise choose, on the same calibration operands, and the relative Frobenius
// distance between the two outputs, per output channel and over the layer, is
// the layer's measured error (docs/fp8.md).
#pragma once

#include <cstdint>
#include <string>

#include "exec/backend.hpp"

namespace ge2 {

// Rows of A (tokens) the gate runs, whatever the plan's: enough samples per output
// channel for its error, cheap at compile.
inline constexpr std::int64_t kFp8CalibrationRows = 256;

struct Fp8GateResult {
  // ||D_fp8 - D_16|| / ||D_16|| over the layer, and the largest such ratio over
  // output channels (columns of D), which the gate compares with the budget;
  // infinite when the FP8 output is not finite where the 16-bit one is.
  double relative_error = 0;
  double worst_channel_error = 0;
  std::int64_t rows = 0;  // calibration rows run
  KernelId reference{};   // the 16-bit kernel compared against
  // Why the backend could not build the FP8 kernel's step for the calibration
  // problem (nothing was measured then); empty when it ran.
  std::string unsupported;
};

// Runs `fp8_kernel` and the policy's best non-FP8 kernel on `problem` with
// kFp8CalibrationRows rows, without its activation. Operands the plan holds as constants are used
// as they are (`b`, `bias`: their plan memory, or nullptr); every other operand (A, and C, B or
// bias when they are not constants) is drawn from a standard normal distribution with a fixed seed.
// `b_prepared`: the constant B in the FP8 kernel's form (prepare_gemm_weight), or nullptr.
Fp8GateResult measure_fp8_error(Backend& backend, const GemmProblem& problem, KernelId fp8_kernel,
                                const void* b, const void* bias, const void* b_prepared,
                                const SelectionPolicy& policy);

}  // namespace ge2
