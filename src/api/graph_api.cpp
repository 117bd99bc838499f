// Graph builder entry points. Each validates its arguments, infers the node's
// type with the same rules the shape-inference pass uses, and appends it.
#include <cmath>
#include <cstring>

#include "api/api_guard.hpp"
#include "api/api_objects.hpp"
#include "api/graph_access.hpp"
#include "core/host_memory.hpp"
#include "core/raw_enum.hpp"
#include "ir/quantized_constant.hpp"

using namespace ge2;

namespace {

// The struct as 2.0 to 2.3 declare it; the 2.2 entry point keeps filling this many bytes.
constexpr std::size_t kAttrsSize22 = 20;
static_assert(sizeof(ge2_gemm_attrs_t) == kAttrsSize22 && offsetof(ge2_gemm_attrs_t, beta) == 16,
              "ge2_gemm_attrs_t's layout is part of the ABI: append fields, and keep "
              "kAttrsSize22 for the 2.2 entry point");

ge2_gemm_attrs_t default_attrs() {
  ge2_gemm_attrs_t attrs{};
  attrs.struct_size = sizeof(ge2_gemm_attrs_t);
  attrs.alpha = 1.0f;
  return attrs;
}

constexpr std::size_t kMaxNameLength = 255;

void check_name(const char* name, const char* function) {
  require_not_null(name, function, "name");
  const std::size_t length = std::strlen(name);
  require(length > 0 && length <= kMaxNameLength, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'name' must have 1 to {} bytes, it has {}", function, kMaxNameLength,
          length);
}

// A name for a new input, constant or output: valid, and not taken by any of them.
void check_new_name(const Graph& graph, const char* name, const char* function) {
  check_name(name, function);
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    require(!node.is_source() || node.input_name != name, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'name' = '{}' is already {}", function, name,
            node.kind == OpKind::Input ? "an input" : "a constant");
  }
  for (const auto& output : graph.outputs()) {
    require(output.name != name, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'name' = '{}' is already an output", function, name);
  }
}

void check_value(const Graph& graph, ge2_value_t value, const char* function,
                 const char* argument) {
  require(graph.contains(value), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument '{}' = {} is not a value of this graph (it has {})", function, argument,
          value, graph.size());
}

GemmAttrs gemm_attrs_from(const ge2_gemm_attrs_t* attrs, const char* function) {
  GemmAttrs result;
  if (attrs == nullptr) return result;
  require_struct_size(*attrs, function, "attrs");
  require(attrs->trans_a == 0 || attrs->trans_a == 1, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'attrs->trans_a' = {} must be 0 or 1", function, attrs->trans_a);
  require(attrs->trans_b == 0 || attrs->trans_b == 1, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'attrs->trans_b' = {} must be 0 or 1", function, attrs->trans_b);
  require(std::isfinite(attrs->alpha), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'attrs->alpha' = {} is not finite", function, attrs->alpha);
  require(std::isfinite(attrs->beta), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'attrs->beta' = {} is not finite", function, attrs->beta);
  result.trans_a = attrs->trans_a != 0;
  result.trans_b = attrs->trans_b != 0;
  result.alpha = attrs->alpha;
  result.beta = attrs->beta;
  return result;
}

// By reference: loading an out-of-range enum by value is already undefined.
void check_activation(const ge2_activation_t& act, const char* function) {
  require(is_valid_activation(raw_enum(act)), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'act' = {} is not a ge2_activation_t", function, raw_enum(act));
}

// Infers the node's type, appends it and returns its value id.
ge2_value_t append(Graph& graph, Node node, const char* function, ge2_value_t* out) {
  require_not_null(out, function, "out");
  node.type = infer_node_type(graph, node, function);
  *out = graph.add(std::move(node));
  return *out;
}

}  // namespace

extern "C" {

ge2_status_t ge2_graph_create(ge2_graph_t** out) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(out, f, "out");
    *out = std::make_unique<ge2_graph_s>().release();
  });
}

void ge2_graph_destroy(ge2_graph_t* graph) { std::unique_ptr<ge2_graph_s> owned(graph); }

namespace {

void add_input(ge2_graph_t* graph, const char* name, const ge2_tensor_desc_t* desc, bool dynamic,
               ge2_value_t* out, const char* f) {
  GraphWriteLock lock(graph, f);
  check_new_name(graph->graph, name, f);
  require_not_null(desc, f, "desc");
  Node node;
  node.kind = OpKind::Input;
  node.input_name = name;
  const std::string where = fmt::format("{}: argument 'desc'", f);
  node.type = tensor_type_from_desc(*desc, where);
  if (dynamic) {
    check_leading_dimension_outermost(node.type, where);
    node.type.dynamic = true;
  }
  require_not_null(out, f, "out");
  *out = graph->graph.add(std::move(node));
}

}  // namespace

ge2_status_t ge2_graph_add_input(ge2_graph_t* graph, const char* name,
                                 const ge2_tensor_desc_t* desc, ge2_value_t* out) {
  return guarded(__func__,
                 [&](const char* f) { add_input(graph, name, desc, /*dynamic=*/false, out, f); });
}

ge2_status_t ge2_graph_add_dynamic_input(ge2_graph_t* graph, const char* name,
                                         const ge2_tensor_desc_t* desc, ge2_value_t* out) {
  return guarded(__func__,
                 [&](const char* f) { add_input(graph, name, desc, /*dynamic=*/true, out, f); });
}

ge2_status_t ge2_graph_add_constant(ge2_graph_t* graph, const char* name,
                                    const ge2_tensor_desc_t* desc, const void* data,
                                    ge2_value_t* out) {
  return guarded(__func__, [&](const char* f) {
    GraphWriteLock lock(graph, f);
    check_new_name(graph->graph, name, f);
    require_not_null(desc, f, "desc");
    require_not_null(data, f, "data");
    require_not_null(out, f, "out");
    Node node;
    node.kind = OpKind::Constant;
    node.input_name = name;
    node.type = tensor_type_from_desc(*desc, fmt::format("{}: argument 'desc'", f));
    const std::size_t bytes = node.type.span_bytes();
    require_fits_in_host_memory(bytes, fmt::format("{}: constant '{}'", f, name).c_str());
    auto copy = std::make_shared<std::vector<unsigned char>>(bytes);
    std::memcpy(copy->data(), data, bytes);
    node.constant_data = std::move(copy);
    *out = graph->graph.add(std::move(node));
  });
}

namespace {

// Both entry points of quantized constants: `block` set for the block form.
ge2_status_t add_quantized_constant(const char* function, ge2_graph_t* graph, const char* name,
                                    const ge2_tensor_desc_t* desc, ge2_dtype_t storage_dtype,
                                    const void* data, const float* scales, int64_t scale_count,
                                    int32_t scale_axis,
                                    std::optional<std::array<std::int64_t, 2>> block,
                                    ge2_value_t* out) {
  return guarded(function, [&](const char* f) {
    GraphWriteLock lock(graph, f);
    check_new_name(graph->graph, name, f);
    require_not_null(desc, f, "desc");
    require_not_null(data, f, "data");
    require_not_null(scales, f, "scales");
    require_not_null(out, f, "out");
    QuantizedConstantArgs args;
    args.value = tensor_type_from_desc(*desc, fmt::format("{}: argument 'desc'", f));
    args.storage_dtype = raw_enum(storage_dtype);
    args.data = data;
    args.scales = scales;
    args.scale_count = scale_count;
    args.scale_axis = scale_axis;
    args.block = block;
    *out = graph->graph.add(make_quantized_constant(args, name, f));
  });
}

}  // namespace

ge2_status_t ge2_graph_add_quantized_constant(ge2_graph_t* graph, const char* name,
                                              const ge2_tensor_desc_t* desc,
                                              ge2_dtype_t storage_dtype, const void* data,
                                              const float* scales, int64_t scale_count,
                                              int32_t scale_axis, ge2_value_t* out) {
  return add_quantized_constant(__func__, graph, name, desc, storage_dtype, data, scales,
                                scale_count, scale_axis, std::nullopt, out);
}

ge2_status_t ge2_graph_add_block_quantized_constant(ge2_graph_t* graph, const char* name,
                                                    const ge2_tensor_desc_t* desc,
                                                    ge2_dtype_t storage_dtype, const void* data,
                                                    const float* scales, int64_t scale_count,
                                                    int64_t block_rows, int64_t block_cols,
                                                    ge2_value_t* out) {
  return add_quantized_constant(__func__, graph, name, desc, storage_dtype, data, scales,
                                scale_count, -1,
                                std::array<std::int64_t, 2>{block_rows, block_cols}, out);
}

ge2_status_t ge2_gemm_attrs_init_sized(ge2_gemm_attrs_t* attrs, size_t struct_size) {
  return guarded(__func__, [&](const char* f) {
    init_struct(attrs, struct_size, default_attrs(), sizeof(ge2_gemm_attrs_t), f, "attrs");
  });
}

// The 2.2 entry point: callers built against 2.2 headers pass 2.2-sized structs.
ge2_status_t(ge2_gemm_attrs_init)(ge2_gemm_attrs_t* attrs) {
  return guarded(__func__, [&](const char* f) {
    init_struct(attrs, kAttrsSize22, default_attrs(), sizeof(ge2_gemm_attrs_t), f, "attrs");
  });
}

ge2_status_t ge2_graph_add_gemm(ge2_graph_t* graph, ge2_value_t a, ge2_value_t b, ge2_value_t c,
                                const ge2_gemm_attrs_t* attrs, ge2_value_t* out) {
  return guarded(__func__, [&](const char* f) {
    GraphWriteLock lock(graph, f);
    check_value(graph->graph, a, f, "a");
    check_value(graph->graph, b, f, "b");
    if (c != GE2_NO_VALUE) check_value(graph->graph, c, f, "c");
    Node node;
    node.kind = OpKind::Gemm;
    node.a = a;
    node.b = b;
    node.c = c == GE2_NO_VALUE ? kNoValue : c;
    node.gemm = gemm_attrs_from(attrs, f);
    append(graph->graph, std::move(node), f, out);
  });
}

ge2_status_t ge2_graph_add_bias(ge2_graph_t* graph, ge2_value_t x, ge2_value_t bias,
                                ge2_value_t* out) {
  return guarded(__func__, [&](const char* f) {
    GraphWriteLock lock(graph, f);
    check_value(graph->graph, x, f, "x");
    check_value(graph->graph, bias, f, "bias");
    Node node;
    node.kind = OpKind::BiasAdd;
    node.x = x;
    node.bias = bias;
    append(graph->graph, std::move(node), f, out);
  });
}

ge2_status_t ge2_graph_add_activation(ge2_graph_t* graph, ge2_value_t x, ge2_activation_t act,
                                      ge2_value_t* out) {
  return guarded(__func__, [&](const char* f) {
    GraphWriteLock lock(graph, f);
    check_value(graph->graph, x, f, "x");
    check_activation(act, f);
    Node node;
    node.kind = OpKind::Activation;
    node.x = x;
    node.act = static_cast<Activation>(act);
    append(graph->graph, std::move(node), f, out);
  });
}

ge2_status_t ge2_graph_add_elementwise(ge2_graph_t* graph, ge2_elementwise_op_t op, ge2_value_t a,
                                       ge2_value_t b, ge2_value_t* out) {
  return guarded(__func__, [&](const char* f) {
    GraphWriteLock lock(graph, f);
    const int raw_op = raw_enum(op);
    require(raw_op == GE2_ELEMENTWISE_ADD || raw_op == GE2_ELEMENTWISE_MUL,
            GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'op' = {} is not a ge2_elementwise_op_t (GE2_ELEMENTWISE_ADD = 1, "
            "GE2_ELEMENTWISE_MUL = 2)",
            f, raw_op);
    check_value(graph->graph, a, f, "a");
    check_value(graph->graph, b, f, "b");
    Node node;
    node.kind = raw_op == GE2_ELEMENTWISE_ADD ? OpKind::Add : OpKind::Mul;
    node.x = a;
    node.y = b;
    append(graph->graph, std::move(node), f, out);
  });
}

ge2_status_t ge2_graph_add_gemm_bias_act(ge2_graph_t* graph, ge2_value_t a, ge2_value_t b,
                                         ge2_value_t bias, const ge2_gemm_attrs_t* attrs,
                                         ge2_activation_t act, ge2_value_t* out) {
  return guarded(__func__, [&](const char* f) {
    GraphWriteLock lock(graph, f);
    check_value(graph->graph, a, f, "a");
    check_value(graph->graph, b, f, "b");
    if (bias != GE2_NO_VALUE) check_value(graph->graph, bias, f, "bias");
    check_activation(act, f);
    Node node;
    node.kind = OpKind::GemmBiasAct;
    node.a = a;
    node.b = b;
    node.bias = bias == GE2_NO_VALUE ? kNoValue : bias;
    node.gemm = gemm_attrs_from(attrs, f);
    require(node.gemm.beta == 0.0f, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'attrs->beta' = {}: the fused node has no C operand; use "
            "ge2_graph_add_gemm for beta != 0",
            f, node.gemm.beta);
    node.act = static_cast<Activation>(act);
    append(graph->graph, std::move(node), f, out);
  });
}

ge2_status_t ge2_graph_mark_output(ge2_graph_t* graph, ge2_value_t value, const char* name,
                                   const ge2_tensor_desc_t* layout) {
  return guarded(__func__, [&](const char* f) {
    GraphWriteLock lock(graph, f);
    check_value(graph->graph, value, f, "value");
    for (const auto& output : graph->graph.outputs()) {
      require(output.value != value, GE2_ERROR_INVALID_ARGUMENT,
              "{}: argument 'value' = {} is already the output '{}'", f, value, output.name);
    }
    check_new_name(graph->graph, name, f);
    const Node& node = graph->graph.node(value);
    require(!node.is_source(), GE2_ERROR_UNSUPPORTED,
            "{}: argument 'value' = {} is the graph {} '{}'; ge2 does not copy inputs or "
            "constants to outputs",
            f, value, op_kind_name(node.kind), node.input_name);
    GraphOutput output{value, name, std::nullopt};
    if (layout != nullptr) {
      const std::string where = fmt::format("{}: argument 'layout'", f);
      TensorType type = tensor_type_from_desc(*layout, where);
      if (node.type.dynamic) {
        check_leading_dimension_outermost(type, where);
        type.dynamic = true;
      }
      require(type.dtype == node.type.dtype && type.same_shape(node.type), GE2_ERROR_SHAPE_MISMATCH,
              "{}: argument 'layout': {} differs from the value's {}", f, type, node.type);
      output.layout = type;
    }
    graph->graph.add_output(std::move(output));
  });
}

ge2_status_t ge2_graph_get_desc(const ge2_graph_t* graph, ge2_value_t value,
                                ge2_tensor_desc_t* out) {
  return guarded(__func__, [&](const char* f) {
    const GraphReadLock lock(graph, f);
    check_value(graph->graph, value, f, "value");
    require_not_null(out, f, "out");
    *out = graph->graph.node(value).type.to_desc();
  });
}

}  // extern "C"
