#include "core/tensor_type.hpp"

#include <algorithm>
#include <numeric>

#include "core/checked_math.hpp"
#include "core/error.hpp"
#include "core/raw_enum.hpp"

namespace ge2 {

// Types built by tensor_type_from_desc and infer_node_type stay within
// kMaxElements, so these checks only fire on a type built some other way.
std::int64_t TensorType::element_count() const {
  std::int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const auto next = checked_mul(count, shape[i]);
    require(next.has_value(), GE2_ERROR_INVALID_ARGUMENT,
            "tensor {}: the element count overflows int64", *this);
    count = *next;
  }
  return count;
}

std::int64_t TensorType::span_elements() const {
  if (element_count() == 0) return 0;
  std::int64_t last = 0;
  for (int i = 0; i < rank; ++i) {
    const auto offset = checked_mul(shape[i] - 1, strides[i]);
    const auto next = offset ? checked_add(last, *offset) : std::nullopt;
    require(next.has_value(), GE2_ERROR_INVALID_ARGUMENT,
            "tensor {}: the span of its strides overflows int64", *this);
    last = *next;
  }
  return last + 1;
}

std::size_t TensorType::span_bytes() const {
  const auto bytes = checked_bytes(span_elements(), dtype_size(dtype));
  require(bytes.has_value(), GE2_ERROR_INVALID_ARGUMENT,
          "tensor {}: the byte size overflows size_t", *this);
  return *bytes;
}

bool TensorType::same_shape(const TensorType& other) const {
  if (rank != other.rank || dynamic != other.dynamic) return false;
  for (int i = 0; i < rank; ++i)
    if (shape[i] != other.shape[i]) return false;
  return true;
}

std::string TensorType::shape_string() const {
  std::string text = "[";
  for (int i = 0; i < rank; ++i)
    text += fmt::format("{}{}{}", i ? ", " : "", i == 0 && dynamic ? "1.." : "", shape[i]);
  return text + fmt::format("] {}", dtype_name(dtype));
}

TensorType TensorType::at_extent(std::int64_t extent) const {
  TensorType type = *this;
  if (dynamic) type.shape[0] = extent;
  return type;
}

ge2_tensor_desc_t TensorType::to_desc() const {
  ge2_tensor_desc_t desc{};
  desc.dtype = static_cast<ge2_dtype_t>(dtype);
  desc.rank = rank;
  for (int i = 0; i < 3; ++i) {
    desc.shape[i] = i < rank ? shape[i] : 0;
    desc.strides[i] = i < rank ? strides[i] : 0;
  }
  return desc;
}

TensorType TensorType::dense(DType dtype, int rank, std::array<std::int64_t, 3> shape) {
  TensorType type;
  type.dtype = dtype;
  type.rank = rank;
  type.shape = shape;
  std::int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    type.strides[i] = stride;
    stride *= shape[i];
  }
  for (int i = rank; i < 3; ++i) type.shape[i] = type.strides[i] = 0;
  return type;
}

void check_leading_dimension_outermost(const TensorType& type, const std::string& where) {
  TensorType inner = type;
  inner.shape[0] = 1;
  require(type.rank > 1 && type.strides[0] >= inner.span_elements(), GE2_ERROR_INVALID_ARGUMENT,
          "{}: a dynamic leading dimension needs rank 2 or 3 and dimension 0 outermost, but {} has "
          "strides [{}, {}, {}]",
          where, type, type.strides[0], type.strides[1], type.strides[2]);
}

void check_strides_do_not_overlap(const TensorType& type, const std::string& where) {
  // Sorting the dimensions by stride, each stride must step over the whole
  // extent of the dimensions inside it; this is the usual sufficient test.
  std::array<int, 3> order{0, 1, 2};
  for (int i = 1; i < type.rank; ++i)  // insertion sort of at most three dimensions
    for (int j = i; j > 0 && type.strides[order[j]] < type.strides[order[j - 1]]; --j)
      std::swap(order[j], order[j - 1]);
  std::int64_t extent = 1;
  for (int i = 0; i < type.rank; ++i) {
    const int dim = order[i];
    if (type.shape[dim] == 1) continue;
    require(type.strides[dim] >= extent, GE2_ERROR_INVALID_ARGUMENT,
            "{}: strides overlap: dimension {} has stride {} but the dimensions inside it span {} "
            "elements",
            where, dim, type.strides[dim], extent);
    extent = type.strides[dim] * type.shape[dim];
  }
}

TensorType tensor_type_from_desc(const ge2_tensor_desc_t& desc, const std::string& where) {
  const std::string dtype_problem = compute_dtype_problem(raw_enum(desc.dtype));
  require(dtype_problem.empty(), GE2_ERROR_INVALID_ARGUMENT, "{}: dtype {}", where, dtype_problem);
  require(desc.rank >= 1 && desc.rank <= 3, GE2_ERROR_INVALID_ARGUMENT,
          "{}: rank {} is not 1, 2 or 3", where, desc.rank);
  TensorType type;
  type.dtype = static_cast<DType>(desc.dtype);
  type.rank = desc.rank;
  std::int64_t elements = 1;
  bool all_strides_zero = true;
  for (int i = 0; i < desc.rank; ++i) {
    require(desc.shape[i] > 0, GE2_ERROR_INVALID_ARGUMENT, "{}: shape[{}] = {} must be positive",
            where, i, desc.shape[i]);
    require(desc.shape[i] <= kMaxDimension, GE2_ERROR_INVALID_ARGUMENT,
            "{}: shape[{}] = {} exceeds the largest supported dimension {}", where, i,
            desc.shape[i], kMaxDimension);
    const auto grown = bounded_product({elements, desc.shape[i]}, kMaxElements);
    require(grown.has_value(), GE2_ERROR_INVALID_ARGUMENT,
            "{}: the tensor has more than {} elements", where, kMaxElements);
    elements = *grown;
    require(desc.strides[i] >= 0, GE2_ERROR_INVALID_ARGUMENT, "{}: strides[{}] = {} is negative",
            where, i, desc.strides[i]);
    require(desc.strides[i] <= kMaxElements, GE2_ERROR_INVALID_ARGUMENT,
            "{}: strides[{}] = {} exceeds {}", where, i, desc.strides[i], kMaxElements);
    if (desc.strides[i] != 0) all_strides_zero = false;
  }
  if (all_strides_zero) {
    return TensorType::dense(type.dtype, type.rank, {desc.shape[0], desc.shape[1], desc.shape[2]});
  }
  for (int i = 0; i < desc.rank; ++i) {
    type.shape[i] = desc.shape[i];
    type.strides[i] = desc.strides[i];
    require(desc.strides[i] > 0 || desc.shape[i] == 1, GE2_ERROR_INVALID_ARGUMENT,
            "{}: strides[{}] = 0 for a dimension of size {} (broadcast strides are not "
            "supported)",
            where, i, desc.shape[i]);
    require(bounded_product({desc.shape[i] - 1, desc.strides[i]}, kMaxElements).has_value(),
            GE2_ERROR_INVALID_ARGUMENT,
            "{}: shape[{}] = {} with strides[{}] = {} spans more than {} elements", where, i,
            desc.shape[i], i, desc.strides[i], kMaxElements);
  }
  require(type.span_elements() <= kMaxElements, GE2_ERROR_INVALID_ARGUMENT,
          "{}: strides make the tensor span {} elements, more than {}", where, type.span_elements(),
          kMaxElements);
  check_strides_do_not_overlap(type, where);
  return type;
}

TensorType broadcast_to(const TensorType& type, const TensorType& target) {
  TensorType view = target;
  view.dtype = type.dtype;
  const int offset = target.rank - type.rank;
  for (int i = 0; i < target.rank; ++i) view.strides[i] = i < offset ? 0 : type.strides[i - offset];
  return view;
}

MatrixView matrix_view(const TensorType& type) {
  MatrixView view;
  const int r = type.rank;
  view.rows = type.shape[r - 2];
  view.cols = type.shape[r - 1];
  view.row_stride = type.strides[r - 2];
  view.col_stride = type.strides[r - 1];
  if (r == 3) {
    view.batch = type.shape[0];
    view.batch_stride = type.strides[0];
  }
  return view;
}

}  // namespace ge2
