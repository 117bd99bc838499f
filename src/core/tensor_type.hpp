// A tensor's type: dtype, rank (1..3), shape and strides in elements.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.hpp"

namespace ge2 {

struct TensorType {
  DType dtype = DType::F32;
  int rank = 0;
  std::array<std::int64_t, 3> shape{0, 0, 0};
  std::array<std::int64_t, 3> strides{0, 0, 0};
  // shape[0] is the graph's dynamic extent (the token or batch count given at
  // execution) and holds its upper bound; strides[0] is the outermost stride, so
  // a smaller extent addresses a prefix of the bound's span.
  bool dynamic = false;

  std::int64_t element_count() const;
  // Elements between the first and one past the last addressed element.
  std::int64_t span_elements() const;
  std::size_t span_bytes() const;
  // Equal ranks, dimensions and dynamic leading dimension.
  bool same_shape(const TensorType& other) const;
  std::string shape_string() const;  // e.g. "[4, 128, 64] f16", dynamic "[1..4, 128, 64] f16"
  // The type at `extent` rows (or batches) when dynamic; itself otherwise.
  TensorType at_extent(std::int64_t extent) const;

  ge2_tensor_desc_t to_desc() const;
  static TensorType dense(DType dtype, int rank, std::array<std::int64_t, 3> shape);
};

}  // namespace ge2

// "{}" of a TensorType is its shape_string(), built only when a message is:
// require()'s arguments are evaluated on every check, failing or not.
template <>
struct fmt::formatter<ge2::TensorType> : fmt::formatter<std::string_view> {
  auto format(const ge2::TensorType& type, fmt::format_context& context) const {
    return fmt::formatter<std::string_view>::format(type.shape_string(), context);
  }
};

namespace ge2 {

// Largest dimension and element count ge2 accepts: keeps every offset and byte
// count computed from them far from int64 overflow.
inline constexpr std::int64_t kMaxDimension = std::int64_t{1} << 31;
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

// Validates a caller's description and returns it with strides filled in.
// `where` names the function and argument for error messages.
TensorType tensor_type_from_desc(const ge2_tensor_desc_t& desc, const std::string& where);

// Throws GE2_ERROR_INVALID_ARGUMENT unless dimension 0's stride steps over the
// span of the others (needed for a dynamic leading dimension: see `dynamic`).
void check_leading_dimension_outermost(const TensorType& type, const std::string& where);

// Throws GE2_ERROR_INVALID_ARGUMENT if the strides address one element twice.
void check_strides_do_not_overlap(const TensorType& type, const std::string& where);

// `type` seen with `target`'s shape, for a type whose shape is a trailing part
// of target's: the leading dimensions it is broadcast over get stride 0.
TensorType broadcast_to(const TensorType& type, const TensorType& target);

// A rank-2 or rank-3 tensor seen as a batch of matrices.
struct MatrixView {
  std::int64_t batch = 1, rows = 0, cols = 0;
  std::int64_t batch_stride = 0, row_stride = 0, col_stride = 0;
};
MatrixView matrix_view(const TensorType& type);

}  // namespace ge2
