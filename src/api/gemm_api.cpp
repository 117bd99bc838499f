// ge2_gemm_bias_act: the one-shot call, built on a cached one-node plan.
#include "api/api_guard.hpp"
#include "api/api_objects.hpp"
#include "core/checked_math.hpp"
#include "core/raw_enum.hpp"

using namespace ge2;

namespace {

// The struct as 2.0 to 2.3 declare it; the 2.2 entry point keeps filling this many bytes.
constexpr std::size_t kParamsSize22 = 112;
static_assert(sizeof(ge2_gemm_params_t) == kParamsSize22 &&
                  offsetof(ge2_gemm_params_t, alpha) == 108,
              "ge2_gemm_params_t's layout is part of the ABI: append fields, and keep "
              "kParamsSize22 for the 2.2 entry point");

ge2_gemm_params_t default_params() {
  ge2_gemm_params_t params{};
  params.struct_size = sizeof(ge2_gemm_params_t);
  params.batch = 1;
  params.dtype = GE2_DTYPE_F16;
  params.activation = GE2_ACT_NONE;
  params.alpha = 1.0f;
  return params;
}

void check_params(const ge2_gemm_params_t& p, const char* f) {
  require_struct_size(p, f, "params");
  auto positive = [&](std::int64_t value, const char* name) {
    require(value > 0 && value <= kMaxDimension, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'params->{}' = {} must be in 1..{}", f, name, value, kMaxDimension);
  };
  positive(p.m, "m");
  positive(p.n, "n");
  positive(p.k, "k");
  positive(p.batch, "batch");
  require(p.trans_a == 0 || p.trans_a == 1, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'params->trans_a' = {} must be 0 or 1", f, p.trans_a);
  require(p.trans_b == 0 || p.trans_b == 1, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'params->trans_b' = {} must be 0 or 1", f, p.trans_b);
  require(p.has_bias == 0 || p.has_bias == 1, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'params->has_bias' = {} must be 0 or 1", f, p.has_bias);
  const std::string dtype_problem = compute_dtype_problem(raw_enum(p.dtype));
  require(dtype_problem.empty(), GE2_ERROR_INVALID_ARGUMENT, "{}: argument 'params->dtype' = {}", f,
          dtype_problem);
  require(is_valid_activation(raw_enum(p.activation)), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'params->activation' = {} is not a ge2_activation_t", f,
          raw_enum(p.activation));
  require(std::isfinite(p.alpha), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'params->alpha' = {} is not finite", f, p.alpha);
}

// Describes one row-major operand [batch,] rows x cols with leading dimension ld
// and batch stride, checking both against the matrix they must hold.
ge2_tensor_desc_t operand_desc(const ge2_gemm_params_t& p, std::int64_t rows, std::int64_t cols,
                               std::int64_t ld, std::int64_t batch_stride, const char* ld_name,
                               const char* stride_name, const char* f) {
  require(ld >= 0, GE2_ERROR_INVALID_ARGUMENT, "{}: argument 'params->{}' = {} is negative", f,
          ld_name, ld);
  require(batch_stride >= 0, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'params->{}' = {} is negative", f, stride_name, batch_stride);
  const std::int64_t leading = ld == 0 ? cols : ld;
  require(leading >= cols, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'params->{}' = {} is smaller than the row length {}", f, ld_name, ld, cols);
  const auto tight_stride = bounded_product({rows, leading}, kMaxElements);
  require(tight_stride.has_value(), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'params->{}' = {} makes the matrix span more than {} elements", f, ld_name,
          ld, kMaxElements);
  const std::int64_t matrix_span = *tight_stride - leading + cols;
  const std::int64_t stride = batch_stride == 0 ? *tight_stride : batch_stride;
  require(
      p.batch == 1 || stride >= matrix_span, GE2_ERROR_INVALID_ARGUMENT,
      "{}: argument 'params->{}' = {} is smaller than one matrix's span {}: batches would overlap",
      f, stride_name, batch_stride, matrix_span);
  ge2_tensor_desc_t desc{};
  desc.dtype = p.dtype;
  if (p.batch > 1) {
    desc.rank = 3;
    desc.shape[0] = p.batch;
    desc.shape[1] = rows;
    desc.shape[2] = cols;
    desc.strides[0] = stride;
    desc.strides[1] = leading;
    desc.strides[2] = 1;
  } else {
    desc.rank = 2;
    desc.shape[0] = rows;
    desc.shape[1] = cols;
    desc.strides[0] = leading;
    desc.strides[1] = 1;
  }
  return desc;
}

std::string cache_key(const ge2_gemm_params_t& p) {
  return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", p.m, p.n, p.k, p.batch,
                     p.trans_a, p.trans_b, p.lda, p.ldb, p.ldd, p.stride_a, p.stride_b, p.stride_d,
                     static_cast<int>(p.dtype), static_cast<int>(p.activation), p.has_bias,
                     p.alpha);
}

std::unique_ptr<Plan> build_one_shot_plan(ge2_context_t* context, const ge2_gemm_params_t& p,
                                          const char* f) {
  Graph graph;
  auto input = [&](const char* name, const ge2_tensor_desc_t& desc) {
    Node node;
    node.kind = OpKind::Input;
    node.input_name = name;
    node.type = tensor_type_from_desc(desc, fmt::format("{}: argument 'params' ({})", f, name));
    return graph.add(std::move(node));
  };
  const ValueId a = input("a", operand_desc(p, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda,
                                            p.stride_a, "lda", "stride_a", f));
  const ValueId b = input("b", operand_desc(p, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb,
                                            p.stride_b, "ldb", "stride_b", f));
  ValueId bias = kNoValue;
  if (p.has_bias) {
    ge2_tensor_desc_t desc{};
    desc.dtype = p.dtype;
    desc.rank = 1;
    desc.shape[0] = p.n;
    bias = input("bias", desc);
  }
  Node node;
  node.kind = OpKind::GemmBiasAct;
  node.a = a;
  node.b = b;
  node.bias = bias;
  node.gemm.trans_a = p.trans_a != 0;
  node.gemm.trans_b = p.trans_b != 0;
  node.gemm.alpha = p.alpha;
  node.act = static_cast<Activation>(p.activation);
  node.type = infer_node_type(graph, node, f);
  const ValueId d = graph.add(std::move(node));
  const ge2_tensor_desc_t d_desc =
      operand_desc(p, p.m, p.n, p.ldd, p.stride_d, "ldd", "stride_d", f);
  graph.add_output(
      {d, "d", tensor_type_from_desc(d_desc, fmt::format("{}: argument 'params' (d)", f))});
  // The defaults, and $GE2_FORCE_KERNEL as for any plan compiled without options.
  CompileOptions options = compile_options_from(nullptr, f);
  options.describe = false;  // a one-shot call's plan is never shown
  return compile_plan(context->backend, std::move(graph), options);
}

}  // namespace

extern "C" {

ge2_status_t ge2_gemm_params_init_sized(ge2_gemm_params_t* params, size_t struct_size) {
  return guarded(__func__, [&](const char* f) {
    init_struct(params, struct_size, default_params(), sizeof(ge2_gemm_params_t), f, "params");
  });
}

// The 2.2 entry point: callers built against 2.2 headers pass 2.2-sized structs.
ge2_status_t(ge2_gemm_params_init)(ge2_gemm_params_t* params) {
  return guarded(__func__, [&](const char* f) {
    init_struct(params, kParamsSize22, default_params(), sizeof(ge2_gemm_params_t), f, "params");
  });
}

ge2_status_t ge2_gemm_bias_act(ge2_context_t* context, const ge2_gemm_params_t* params,
                               const void* a, const void* b, const void* bias, void* d,
                               void* stream) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(context, f, "context");
    require_not_null(params, f, "params");
    check_params(*params, f);
    require_not_null(a, f, "a");
    require_not_null(b, f, "b");
    require_not_null(d, f, "d");
    require((bias != nullptr) == (params->has_bias != 0), GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'bias' is {} but params->has_bias = {}", f, bias ? "non-NULL" : "NULL",
            params->has_bias);
    std::shared_ptr<Plan> plan;
    bool compiled = false;
    {
      std::lock_guard lock(context->mutex);
      const std::string key = cache_key(*params);
      plan = context->one_shot_plans.find(key);
      if (plan == nullptr) {
        plan = build_one_shot_plan(context, *params, f);
        context->one_shot_plans.insert(key, plan);
        compiled = true;
      }
    }
    if (compiled) record_selected_gemms(*context, *plan);  // takes the context's mutex
    const ge2_binding_t bindings[] = {{"a", const_cast<void*>(a)},
                                      {"b", const_cast<void*>(b)},
                                      {"d", d},
                                      {"bias", const_cast<void*>(bias)}};
    plan->execute(bindings, params->has_bias ? 4 : 3, stream);
  });
}

}  // extern "C"
