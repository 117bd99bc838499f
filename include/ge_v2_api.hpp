/*
** ge_v2_api.hpp: a header-only C++17 wrapper of ge_v2_api.h.
**
** RAII owners for the three handles (Context, Graph, Plan: movable, not
** copyable, destroyed with their owner) and exceptions instead of statuses:
** every failing call throws ge2::cxx::Error carrying the status and the
** library's message (ge2_last_error()). The wrapper adds no state and no
** symbols: it calls the C functions, so its ABI is the C API's.
**
**   ge2::cxx::Context context;                       // GE2_DEVICE_AUTO
**   ge2::cxx::Graph graph;
**   auto x = graph.input("x", {GE2_DTYPE_F16, 2, {tokens, 4096}, {}});
**   auto w = graph.constant("w", {GE2_DTYPE_F16, 2, {11008, 4096}, {}}, weights);
**   graph.output(graph.activation(graph.gemm(x, w, ge2::cxx::linear()), GE2_ACT_SILU), "y");
**   ge2::cxx::Plan plan(context, graph);
**   plan.execute({{"x", x_data}, {"y", y_data}}, stream);
*/
#ifndef GE_V2_API_HPP
#define GE_V2_API_HPP

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ge_v2_api.h"

namespace ge2 {
namespace cxx {

/* A failed call: status() is the ge2_status_t, what() "STATUS: message". */
class Error : public std::runtime_error {
 public:
  Error(ge2_status_t status, const std::string& message)
      : std::runtime_error(std::string(ge2_status_string(status)) + ": " + message),
        status_(status) {}
  ge2_status_t status() const noexcept { return status_; }

 private:
  ge2_status_t status_;
};

/* Throws Error for any status but GE2_OK. */
inline void check(ge2_status_t status) {
  if (status != GE2_OK) throw Error(status, ge2_last_error());
}

/* Default options of each kind, as the *_init functions set them. */
inline ge2_context_options_t context_options() {
  ge2_context_options_t options;
  check(ge2_context_options_init(&options));
  return options;
}
inline ge2_compile_options_t compile_options() {
  ge2_compile_options_t options;
  check(ge2_compile_options_init(&options));
  return options;
}
inline ge2_gemm_attrs_t gemm_attrs() {
  ge2_gemm_attrs_t attrs;
  check(ge2_gemm_attrs_init(&attrs));
  return attrs;
}
/* Defaults for the one-shot call's parameters (sizes zero: the caller sets them). */
inline ge2_gemm_params_t gemm_params() {
  ge2_gemm_params_t params;
  check(ge2_gemm_params_init(&params));
  return params;
}
/* The library's release version ("2.8.0") and the GE2_API_VERSION it was built with. */
inline std::string version() { return ge2_get_version_string(); }
inline int api_version() { return ge2_get_api_version(); }
/* x * W^T for a weight W in PyTorch nn.Linear's [out, in] layout. */
inline ge2_gemm_attrs_t linear() {
  ge2_gemm_attrs_t attrs = gemm_attrs();
  attrs.trans_b = 1;
  return attrs;
}

namespace detail {
struct ContextDeleter {
  void operator()(ge2_context_t* context) const noexcept { ge2_context_destroy(context); }
};
struct GraphDeleter {
  void operator()(ge2_graph_t* graph) const noexcept { ge2_graph_destroy(graph); }
};
struct PlanDeleter {
  void operator()(ge2_plan_t* plan) const noexcept { ge2_plan_destroy(plan); }
};
}  // namespace detail

/* A device and its cuBLASLt handle and tuning cache (ge2_context_create). */
class Context {
 public:
  explicit Context(const ge2_context_options_t& options = context_options()) {
    ge2_context_t* raw = nullptr;
    check(ge2_context_create(GE2_API_VERSION, &options, &raw));
    handle_.reset(raw);
  }
  /* A context of `device` with the other options at their defaults. */
  static Context on(ge2_device_kind_t device) {
    ge2_context_options_t options = context_options();
    options.device = device;
    return Context(options);
  }
  ge2_device_kind_t device_kind() const {
    ge2_device_kind_t kind;
    check(ge2_context_get_device_kind(handle_.get(), &kind));
    return kind;
  }
  std::string describe() const {
    const char* text = nullptr;
    check(ge2_context_describe(handle_.get(), &text));
    return text;
  }
  ge2_context_t* get() const noexcept { return handle_.get(); }

 private:
  std::unique_ptr<ge2_context_t, detail::ContextDeleter> handle_;
};

/* A graph under construction (ge2_graph_*): each method returns the new value. */
class Graph {
 public:
  Graph() {
    ge2_graph_t* raw = nullptr;
    check(ge2_graph_create(&raw));
    handle_.reset(raw);
  }
  ge2_value_t input(const char* name, const ge2_tensor_desc_t& desc) {
    ge2_value_t out;
    check(ge2_graph_add_input(get(), name, &desc, &out));
    return out;
  }
  /* desc.shape[0] is the bound of the dynamic extent (ge2_graph_add_dynamic_input). */
  ge2_value_t dynamic_input(const char* name, const ge2_tensor_desc_t& desc) {
    ge2_value_t out;
    check(ge2_graph_add_dynamic_input(get(), name, &desc, &out));
    return out;
  }
  /* `data` is copied now (the span the description addresses). */
  ge2_value_t constant(const char* name, const ge2_tensor_desc_t& desc, const void* data) {
    ge2_value_t out;
    check(ge2_graph_add_constant(get(), name, &desc, data, &out));
    return out;
  }
  /* e4m3 codes (rows x cols, row-major) with one scale (scale_axis -1) or one per row (0) or
     column (1); the value is e4m3 * scale in desc.dtype. Both are copied now. (2.7) */
  ge2_value_t quantized_constant(const char* name, const ge2_tensor_desc_t& desc,
                                 const std::uint8_t* codes, const float* scales,
                                 std::int64_t scale_count, std::int32_t scale_axis = -1) {
    ge2_value_t out;
    check(ge2_graph_add_quantized_constant(get(), name, &desc, GE2_DTYPE_F8_E4M3, codes, scales,
                                           scale_count, scale_axis, &out));
    return out;
  }
  /* The same with one scale per block of block_rows x block_cols (row-major grid of
     ceil(rows / block_rows) x ceil(cols / block_cols) scales). (2.8) */
  ge2_value_t block_quantized_constant(const char* name, const ge2_tensor_desc_t& desc,
                                       const std::uint8_t* codes, const float* scales,
                                       std::int64_t scale_count, std::int64_t block_rows,
                                       std::int64_t block_cols) {
    ge2_value_t out;
    check(ge2_graph_add_block_quantized_constant(get(), name, &desc, GE2_DTYPE_F8_E4M3, codes,
                                                 scales, scale_count, block_rows, block_cols,
                                                 &out));
    return out;
  }
  ge2_value_t gemm(ge2_value_t a, ge2_value_t b, const ge2_gemm_attrs_t& attrs = gemm_attrs(),
                   ge2_value_t c = GE2_NO_VALUE) {
    ge2_value_t out;
    check(ge2_graph_add_gemm(get(), a, b, c, &attrs, &out));
    return out;
  }
  ge2_value_t bias(ge2_value_t x, ge2_value_t bias_value) {
    ge2_value_t out;
    check(ge2_graph_add_bias(get(), x, bias_value, &out));
    return out;
  }
  ge2_value_t activation(ge2_value_t x, ge2_activation_t act) {
    ge2_value_t out;
    check(ge2_graph_add_activation(get(), x, act, &out));
    return out;
  }
  ge2_value_t add(ge2_value_t a, ge2_value_t b) { return elementwise(GE2_ELEMENTWISE_ADD, a, b); }
  ge2_value_t mul(ge2_value_t a, ge2_value_t b) { return elementwise(GE2_ELEMENTWISE_MUL, a, b); }
  ge2_value_t elementwise(ge2_elementwise_op_t op, ge2_value_t a, ge2_value_t b) {
    ge2_value_t out;
    check(ge2_graph_add_elementwise(get(), op, a, b, &out));
    return out;
  }
  ge2_value_t gemm_bias_act(ge2_value_t a, ge2_value_t b, ge2_value_t bias_value,
                            ge2_activation_t act, const ge2_gemm_attrs_t& attrs = gemm_attrs()) {
    ge2_value_t out;
    check(ge2_graph_add_gemm_bias_act(get(), a, b, bias_value, &attrs, act, &out));
    return out;
  }
  /* `layout`: the output's strides (NULL: dense row-major). */
  void output(ge2_value_t value, const char* name, const ge2_tensor_desc_t* layout = nullptr) {
    check(ge2_graph_mark_output(get(), value, name, layout));
  }
  ge2_tensor_desc_t desc(ge2_value_t value) const {
    ge2_tensor_desc_t out;
    check(ge2_graph_get_desc(handle_.get(), value, &out));
    return out;
  }
  ge2_graph_t* get() const noexcept { return handle_.get(); }

 private:
  std::unique_ptr<ge2_graph_t, detail::GraphDeleter> handle_;
};

/* A compiled graph (ge2_plan_compile); it may outlive the context and the graph. */
class Plan {
 public:
  Plan(const Context& context, const Graph& graph,
       const ge2_compile_options_t& options = compile_options()) {
    ge2_plan_t* raw = nullptr;
    check(ge2_plan_compile(context.get(), graph.get(), &options, &raw));
    handle_.reset(raw);
  }
  /* Binds every input and output by name and runs the plan on `stream`
  ** (a cudaStream_t; NULL: the legacy default stream, and NULL on the CPU). */
  void execute(std::initializer_list<ge2_binding_t> bindings, void* stream = nullptr) {
    check(ge2_plan_execute(get(), bindings.begin(), bindings.size(), stream));
  }
  void execute(const std::vector<ge2_binding_t>& bindings, void* stream = nullptr) {
    check(ge2_plan_execute(get(), bindings.data(), bindings.size(), stream));
  }
  /* A plan with a dynamic extent, at `extent` rows or batches (1..max_extent()). */
  void execute(int64_t extent, std::initializer_list<ge2_binding_t> bindings,
               void* stream = nullptr) {
    check(ge2_plan_execute_dynamic(get(), extent, bindings.begin(), bindings.size(), stream));
  }
  void execute(int64_t extent, const std::vector<ge2_binding_t>& bindings, void* stream = nullptr) {
    check(ge2_plan_execute_dynamic(get(), extent, bindings.data(), bindings.size(), stream));
  }
  /* The bound of the dynamic extent; 0 for a plan of fixed shapes. */
  int64_t max_extent() const {
    int64_t bound = 0;
    check(ge2_plan_get_max_extent(handle_.get(), &bound));
    return bound;
  }
  /* The plan text: passes, steps, chosen kernels and candidates (JSON). */
  std::string describe() const {
    const char* text = nullptr;
    check(ge2_plan_describe(handle_.get(), &text));
    return text;
  }
  /* Whether input or output `index` (as io()) has the dynamic extent as its leading dimension. */
  bool is_dynamic(size_t index) const {
    int dynamic = 0;
    check(ge2_plan_io_is_dynamic(handle_.get(), index, &dynamic));
    return dynamic != 0;
  }
  std::vector<ge2_io_info_t> io() const {
    size_t count = 0;
    check(ge2_plan_io_count(handle_.get(), &count));
    std::vector<ge2_io_info_t> infos(count);
    for (size_t i = 0; i < count; ++i) check(ge2_plan_io_info(handle_.get(), i, &infos[i]));
    return infos;
  }
  ge2_plan_t* get() const noexcept { return handle_.get(); }

 private:
  std::unique_ptr<ge2_plan_t, detail::PlanDeleter> handle_;
};

/* D = act(alpha * op(A) * op(B) + bias) in one call (ge2_gemm_bias_act): the plan for these
** parameters is compiled on first use and cached in the context. */
inline void gemm_bias_act(const Context& context, const ge2_gemm_params_t& params, const void* a,
                          const void* b, const void* bias, void* d, void* stream = nullptr) {
  check(ge2_gemm_bias_act(context.get(), &params, a, b, bias, d, stream));
}

}  // namespace cxx
}  // namespace ge2

#endif /* GE_V2_API_HPP */
