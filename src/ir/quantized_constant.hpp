// Constants given in a quantized storage type (ge2_graph_add_quantized_constant):
// the checks on what the caller gave and the dequantized value every op reads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "ir/graph.hpp"

namespace ge2 {

// What the caller passed, as given (pointers not yet checked beyond null).
struct QuantizedConstantArgs {
  TensorType value;  // the graph value's type (rank 2, dense, a computing dtype)
  int storage_dtype = 0;
  const void* data = nullptr;
  const float* scales = nullptr;
  std::int64_t scale_count = 0;
  int scale_axis = -1;  // ge2_graph_add_quantized_constant: -1, 0 or 1
  // ge2_graph_add_block_quantized_constant: the block's rows and columns (when
  // given, scale_axis is not read).
  std::optional<std::array<std::int64_t, 2>> block;
};

// The Constant node of `args`: its value dequantized into value.dtype and its
// QuantizedData. Throws GE2_ERROR_INVALID_ARGUMENT naming the argument (as
// `function` calls it) and the value at fault.
Node make_quantized_constant(const QuantizedConstantArgs& args, const std::string& name,
                             const char* function);

}  // namespace ge2
