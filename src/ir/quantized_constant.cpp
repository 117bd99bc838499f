#include "ir/quantized_constant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/host_memory.hpp"

namespace ge2 {

Node make_quantized_constant(const QuantizedConstantArgs& args, const std::string& name,
                             const char* function) {
  const char* f = function;
  const TensorType& value = args.value;
  require(value.rank == 2, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'desc' has rank {}; a quantized constant is a matrix (rank 2)", f,
          value.rank);
  require(value.strides == TensorType::dense(value.dtype, 2, value.shape).strides,
          GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'desc' has strides [{}, {}]; a quantized constant is dense row-major "
          "(strides all zero or [{}, 1])",
          f, value.strides[0], value.strides[1], value.shape[1]);
  require(args.storage_dtype == GE2_DTYPE_F8_E4M3, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'storage_dtype' = {} is not a quantized storage type (GE2_DTYPE_F8_E4M3 "
          "= {} is the one there is)",
          f, args.storage_dtype, static_cast<int>(GE2_DTYPE_F8_E4M3));
  const std::int64_t rows = value.shape[0], cols = value.shape[1];
  auto quantized = std::make_shared<QuantizedData>();
  quantized->storage = DType::F8E4M3;
  quantized->rows = rows;
  quantized->cols = cols;
  if (args.block) {
    const auto [block_rows, block_cols] = *args.block;
    require(block_rows >= 1, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'block_rows' = {} must be at least 1", f, block_rows);
    require(block_cols >= 1, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'block_cols' = {} must be at least 1", f, block_cols);
    quantized->block_rows = std::min(block_rows, std::max<std::int64_t>(rows, 1));
    quantized->block_cols = std::min(block_cols, std::max<std::int64_t>(cols, 1));
    require(args.scale_count == quantized->grid_rows() * quantized->grid_cols(),
            GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'scale_count' = {} must be {} ({} x {} blocks of {} x {} in shape [{}, "
            "{}])",
            f, args.scale_count, quantized->grid_rows() * quantized->grid_cols(),
            quantized->grid_rows(), quantized->grid_cols(), block_rows, block_cols, rows, cols);
  } else {
    require(args.scale_axis >= -1 && args.scale_axis <= 1, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'scale_axis' = {} must be -1 (one scale), 0 (per row) or 1 (per column)",
            f, args.scale_axis);
    const std::int64_t expected =
        args.scale_axis < 0 ? 1 : value.shape[static_cast<std::size_t>(args.scale_axis)];
    require(args.scale_count == expected, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'scale_count' = {} must be {} for scale_axis {} of shape [{}, {}]", f,
            args.scale_count, expected, args.scale_axis, rows, cols);
    quantized->block_rows = args.scale_axis == 0 ? 1 : std::max<std::int64_t>(rows, 1);
    quantized->block_cols = args.scale_axis == 1 ? 1 : std::max<std::int64_t>(cols, 1);
  }
  const auto elements = static_cast<std::size_t>(rows * cols);
  // The dequantized value, the given bytes and scales all stay with the graph.
  require_fits_in_host_memory(elements * (1 + dtype_size(value.dtype)) +
                                  static_cast<std::size_t>(args.scale_count) * sizeof(float),
                              fmt::format("{}: constant '{}'", f, name).c_str());
  quantized->scales.assign(args.scales, args.scales + args.scale_count);
  for (std::size_t i = 0; i < quantized->scales.size(); ++i)
    require(std::isfinite(quantized->scales[i]), GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'scales': scales[{}] = {} is not finite", f, i, quantized->scales[i]);
  quantized->data.resize(elements);
  std::memcpy(quantized->data.data(), args.data, elements);

  const DTypeInfo& storage = dtype_info(quantized->storage);
  const DTypeInfo& out = dtype_info(value.dtype);
  auto bytes = std::make_shared<std::vector<unsigned char>>(elements * out.bytes);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t index = i * cols + j;
      const float stored = storage.load(quantized->data.data(), index);
      require(!std::isnan(stored), GE2_ERROR_INVALID_ARGUMENT,
              "{}: argument 'data': element [{}, {}] is an e4m3 NaN code (0x{:02x})", f, i, j,
              quantized->data[static_cast<std::size_t>(index)]);
      const float scale = quantized->scale_at(i, j);
      out.store(bytes->data(), index, stored * scale);
      const float dequantized = out.load(bytes->data(), index);
      require(std::isfinite(dequantized), GE2_ERROR_INVALID_ARGUMENT,
              "{}: element [{}, {}] = {} * scale {} overflows {}", f, i, j, stored, scale,
              out.name);
    }
  }

  Node node;
  node.kind = OpKind::Constant;
  node.input_name = name;
  node.type = value;
  node.constant_data = std::move(bytes);
  node.quantized = std::move(quantized);
  return node;
}

}  // namespace ge2
