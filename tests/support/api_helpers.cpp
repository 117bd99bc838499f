#include "support/api_helpers.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

namespace ge2::test {

namespace {

ContextPtr create_context(const ge2_context_options_t& options) {
  ge2_context_t* context = nullptr;
  const ge2_status_t status = ge2_context_create(GE2_API_VERSION, &options, &context);
  REQUIRE_MESSAGE(status == GE2_OK, std::string(ge2_last_error()));
  return ContextPtr(context);
}

}  // namespace

ContextPtr make_context(ge2_device_kind_t device) {
  ge2_context_options_t options;
  ge2_context_options_init(&options);
  options.device = device;
  options.tunedb_path = "";
  return create_context(options);
}

ge2_gemm_params_t gemm_params(ge2_dtype_t dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  ge2_gemm_params_t p;
  ge2_gemm_params_init(&p);
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

ContextPtr make_tuning_context(ge2_device_kind_t device, ge2_tune_mode_t mode,
                               const std::string& tunedb_path) {
  ge2_context_options_t options;
  ge2_context_options_init(&options);
  options.device = device;
  options.tune_mode = mode;
  options.tunedb_path = tunedb_path.c_str();
  return create_context(options);
}

GraphPtr make_graph() {
  ge2_graph_t* graph = nullptr;
  REQUIRE(ge2_graph_create(&graph) == GE2_OK);
  return GraphPtr(graph);
}

void expect_refusal(ge2_status_t got, ge2_status_t want, const char* fragment) {
  const std::string message = ge2_last_error();
  INFO(message);
  CHECK(got == want);
  CHECK(message.find(fragment) != std::string::npos);
}

namespace {
class HostMemory final : public Memory {
 public:
  void* upload(HostTensor& t) override { return t.data(); }
  void download(void*, HostTensor&) override {}
};

}  // namespace

std::unique_ptr<Memory> host_memory() { return std::make_unique<HostMemory>(); }

std::string GemmCase::label() const {
  static const char* dtypes[] = {"?", "f16", "bf16", "f32"};
  static const char* acts[] = {"none", "relu", "gelu_erf", "gelu_tanh", "silu", "quick_gelu"};
  static_assert(std::size(acts) == GE2_ACT_QUICK_GELU + 1);
  return fmt::format(
      "{} {}x{}x{}x{} ta={} tb={} bias={} act={} {}{}{}{}{}", dtypes[dtype], batch, m, n, k,
      trans_a, trans_b, has_bias, acts[act], fused_node ? "fused-node" : "chain",
      pad_lda || pad_ldb || pad_ldd ? " padded" : "", a_column_major ? " A-colmajor" : "",
      with_c ? " with-C" : "", shared_b ? " shared-B" : "");
}

ge2_status_t compile_with_huge_intermediate(ge2_context_t* context, std::int64_t cols,
                                            ge2_plan_t** plan) {
  GraphPtr graph = make_graph();
  ge2_tensor_desc_t da{GE2_DTYPE_F32, 2, {std::int64_t{1} << 20, 1}, {0, 0}};
  ge2_tensor_desc_t db{GE2_DTYPE_F32, 2, {1, cols}, {0, 0}};
  ge2_value_t a, b, mid, out;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "a", &da, &a));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "b", &db, &b));
  GE2_CHECK(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &mid));
  GE2_CHECK(ge2_graph_add_activation(graph.get(), mid, GE2_ACT_RELU, &out));
  GE2_CHECK(ge2_graph_add_activation(graph.get(), out, GE2_ACT_RELU, &out));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), out, "d", nullptr));
  ge2_compile_options_t options;
  ge2_compile_options_init(&options);
  options.fuse = 0;  // keeps the intermediate
  return ge2_plan_compile(context, graph.get(), &options, plan);
}

namespace {

std::int64_t padding_changed(const HostTensor& t) {
  std::vector<bool> inside(static_cast<std::size_t>(t.span()), false);
  const std::int64_t batch = t.rank == 3 ? t.shape[0] : 1;
  const std::int64_t rows = t.shape[t.rank - 2], cols = t.shape[t.rank - 1];
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j)
        inside[static_cast<std::size_t>(t.offset(b, i, j))] = true;
  std::int64_t changed = 0;
  for (std::int64_t e = 0; e < t.span(); ++e)
    if (!inside[static_cast<std::size_t>(e)] && !std::isnan(t.get(e))) ++changed;
  return changed;
}

}  // namespace

GemmResult run_gemm_case(ge2_context_t* context, Memory& memory, const GemmCase& c) {
  INFO(c.label());
  auto shape = [&](std::int64_t rows, std::int64_t cols) {
    return c.batch > 1 ? std::vector<std::int64_t>{c.batch, rows, cols}
                       : std::vector<std::int64_t>{rows, cols};
  };
  auto strides = [&](std::int64_t rows, std::int64_t cols, std::int64_t pad) {
    if (pad == 0) return std::vector<std::int64_t>{};
    const std::int64_t ld = cols + pad;
    return c.batch > 1 ? std::vector<std::int64_t>{rows * ld, ld, 1}
                       : std::vector<std::int64_t>{ld, 1};
  };
  const std::int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const std::int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  HostTensor a;
  if (c.a_column_major) {
    // Element (i, j) at j*ld + i: a transposed layout the kernels absorb into trans flags.
    const std::int64_t ld = a_rows + c.pad_lda;
    a = make_tensor(c.dtype, shape(a_rows, a_cols),
                    c.batch > 1 ? std::vector<std::int64_t>{a_cols * ld, 1, ld}
                                : std::vector<std::int64_t>{1, ld});
  } else {
    a = make_tensor(c.dtype, shape(a_rows, a_cols), strides(a_rows, a_cols, c.pad_lda));
  }
  HostTensor b =
      c.shared_b ? make_tensor(c.dtype, {b_rows, b_cols},
                               c.pad_ldb ? std::vector<std::int64_t>{b_cols + c.pad_ldb, 1}
                                         : std::vector<std::int64_t>{})
                 : make_tensor(c.dtype, shape(b_rows, b_cols), strides(b_rows, b_cols, c.pad_ldb));
  HostTensor bias = make_tensor(c.dtype, {c.n});
  HostTensor cm = make_tensor(c.dtype, shape(c.m, c.n));
  HostTensor d = make_tensor(c.dtype, shape(c.m, c.n), strides(c.m, c.n, c.pad_ldd));
  fill_random(a);
  fill_random(b);
  fill_random(bias);
  fill_random(cm);
  poison(d);

  GraphPtr graph = make_graph();
  ge2_value_t va, vb, vbias = GE2_NO_VALUE, vc = GE2_NO_VALUE, vout;
  const ge2_tensor_desc_t da = a.desc(), db = b.desc(), dbias = bias.desc(), dc = cm.desc();
  GE2_CHECK(ge2_graph_add_input(graph.get(), "a", &da, &va));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "b", &db, &vb));
  if (c.has_bias) GE2_CHECK(ge2_graph_add_input(graph.get(), "bias", &dbias, &vbias));
  if (c.with_c) GE2_CHECK(ge2_graph_add_input(graph.get(), "c", &dc, &vc));
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_a = c.trans_a;
  attrs.trans_b = c.trans_b;
  attrs.alpha = c.alpha;
  attrs.beta = c.beta;
  if (c.fused_node && !c.with_c) {
    GE2_CHECK(ge2_graph_add_gemm_bias_act(graph.get(), va, vb, vbias, &attrs, c.act, &vout));
  } else {
    GE2_CHECK(ge2_graph_add_gemm(graph.get(), va, vb, vc, &attrs, &vout));
    if (c.has_bias) GE2_CHECK(ge2_graph_add_bias(graph.get(), vout, vbias, &vout));
    if (c.act != GE2_ACT_NONE) GE2_CHECK(ge2_graph_add_activation(graph.get(), vout, c.act, &vout));
  }
  const ge2_tensor_desc_t dd = d.desc();
  GE2_CHECK(ge2_graph_mark_output(graph.get(), vout, "d", c.pad_ldd ? &dd : nullptr));

  ge2_compile_options_t options;
  GE2_CHECK(ge2_compile_options_init(&options));
  options.force_kernel = c.force_kernel;
  options.allow_tf32 = c.allow_tf32;
  options.allow_staging = c.allow_staging;
  options.fuse = c.fuse;
  options.graph_replay = c.graph_replay;
  if (c.options_struct_size != 0) options.struct_size = c.options_struct_size;
  ge2_plan_t* raw_plan = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph.get(), &options, &raw_plan));
  PlanPtr plan(raw_plan);

  std::vector<ge2_binding_t> bindings{{"a", memory.upload(a)}, {"b", memory.upload(b)}};
  if (c.has_bias) bindings.push_back({"bias", memory.upload(bias)});
  if (c.with_c) bindings.push_back({"c", memory.upload(cm)});
  void* d_pointer = memory.upload(d);
  bindings.push_back({"d", d_pointer});
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings.data(), bindings.size(), memory.stream()));
  memory.download(d_pointer, d);

  GemmRef ref{c.trans_a, c.trans_b, c.alpha, c.beta, c.act};
  const auto expected =
      gemm_reference(a, b, c.with_c ? &cm : nullptr, c.has_bias ? &bias : nullptr, ref);
  ref.act = GE2_ACT_NONE;
  const auto before_activation =
      gemm_reference(a, b, c.with_c ? &cm : nullptr, c.has_bias ? &bias : nullptr, ref);
  const char* json = nullptr;
  GE2_CHECK(ge2_plan_describe(plan.get(), &json));
  return {relative_error(d, expected, &before_activation), json, padding_changed(d)};
}

LinearLayer make_linear_layer(ge2_context_t* context, ge2_dtype_t dtype, std::int64_t m,
                              std::int64_t n, std::int64_t k, ge2_activation_t act,
                              const char* force_kernel) {
  LinearLayer layer{make_tensor(dtype, {m, k}),
                    make_tensor(dtype, {n, k}),
                    make_tensor(dtype, {n}),
                    make_tensor(dtype, {m, n}),
                    nullptr,
                    {}};
  fill_random(layer.a);
  fill_random(layer.b);
  fill_random(layer.bias);
  poison(layer.d);
  GraphPtr graph = make_graph();
  const ge2_tensor_desc_t da = layer.a.desc(), db = layer.b.desc(), dbias = layer.bias.desc();
  ge2_value_t va, vb, vbias, vd;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "a", &da, &va));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "b", &db, &vb));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "bias", &dbias, &vbias));
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_b = 1;
  GE2_CHECK(ge2_graph_add_gemm_bias_act(graph.get(), va, vb, vbias, &attrs, act, &vd));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), vd, "d", nullptr));
  ge2_compile_options_t options;
  GE2_CHECK(ge2_compile_options_init(&options));
  options.force_kernel = force_kernel;
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph.get(), &options, &raw));
  layer.plan.reset(raw);
  layer.reference =
      gemm_reference(layer.a, layer.b, nullptr, &layer.bias, {false, true, 1.0, 0.0, act});
  return layer;
}

std::string FfnCase::label() const {
  static const char* dtypes[] = {"?", "f16", "bf16", "f32"};
  return fmt::format("{} {} tokens={} hidden={} intermediate={}{}{}{}", dtypes[dtype],
                     kind == FfnKind::GeluMlp ? "gelu-mlp" : "swiglu", tokens, hidden, intermediate,
                     residual ? " +residual" : "", fuse ? " fused" : " unfused",
                     constant_weights ? " constant-weights" : "");
}

std::vector<FfnCase> ffn_cases(std::int64_t tokens, std::int64_t hidden,
                               std::int64_t intermediate) {
  std::vector<FfnCase> cases;
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16, GE2_DTYPE_F32})
    for (FfnKind kind : {FfnKind::GeluMlp, FfnKind::SwiGlu})
      for (bool residual : {false, true})
        for (bool fuse : {false, true})
          cases.push_back({.dtype = dtype,
                           .kind = kind,
                           .tokens = tokens,
                           .hidden = hidden,
                           .intermediate = intermediate,
                           .residual = residual,
                           .fuse = fuse,
                           .constant_weights = residual == fuse});
  return cases;
}

PlanPtr compile_plan(ge2_context_t* context, const ge2_graph_t* graph, bool fuse) {
  ge2_compile_options_t options;
  GE2_CHECK(ge2_compile_options_init(&options));
  options.fuse = fuse;
  ge2_plan_t* raw_plan = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph, &options, &raw_plan));
  return PlanPtr(raw_plan);
}

FfnWeights make_ffn_weights(ge2_dtype_t dtype, std::int64_t hidden, std::int64_t intermediate) {
  // Scaled by 1/sqrt(fan_in), as nn.Linear initialises them: activations stay O(1).
  auto weight = [&](std::int64_t out, std::int64_t in) {
    HostTensor w = make_tensor(dtype, {out, in});
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    fill_random(w, -bound, bound);
    return w;
  };
  FfnWeights w{weight(intermediate, hidden), weight(intermediate, hidden),
               weight(hidden, intermediate), make_tensor(dtype, {intermediate}),
               make_tensor(dtype, {hidden})};
  fill_random(w.b1);
  fill_random(w.b2);
  return w;
}

ge2_value_t add_ffn_block(ge2_graph_t* graph, FfnKind kind, bool residual, ge2_value_t x,
                          FfnWeights& w,
                          const std::function<ge2_value_t(const char*, HostTensor&)>& parameter) {
  ge2_gemm_attrs_t linear;  // x * W^T
  GE2_CHECK(ge2_gemm_attrs_init(&linear));
  linear.trans_b = 1;
  auto gemm = [&](ge2_value_t a, ge2_value_t weight) {
    ge2_value_t v;
    GE2_CHECK(ge2_graph_add_gemm(graph, a, weight, GE2_NO_VALUE, &linear, &v));
    return v;
  };
  const ge2_value_t vw1 = parameter("w1", w.w1), vw2 = parameter("w2", w.w2);
  ge2_value_t hidden_value, out;
  if (kind == FfnKind::GeluMlp) {
    const ge2_value_t vb1 = parameter("b1", w.b1), vb2 = parameter("b2", w.b2);
    GE2_CHECK(ge2_graph_add_bias(graph, gemm(x, vw1), vb1, &hidden_value));
    GE2_CHECK(ge2_graph_add_activation(graph, hidden_value, GE2_ACT_GELU_ERF, &hidden_value));
    GE2_CHECK(ge2_graph_add_bias(graph, gemm(hidden_value, vw2), vb2, &out));
  } else {
    const ge2_value_t vw3 = parameter("w3", w.w3);
    ge2_value_t gate;
    GE2_CHECK(ge2_graph_add_activation(graph, gemm(x, vw1), GE2_ACT_SILU, &gate));
    GE2_CHECK(
        ge2_graph_add_elementwise(graph, GE2_ELEMENTWISE_MUL, gate, gemm(x, vw3), &hidden_value));
    out = gemm(hidden_value, vw2);
  }
  if (residual) GE2_CHECK(ge2_graph_add_elementwise(graph, GE2_ELEMENTWISE_ADD, out, x, &out));
  return out;
}

std::vector<double> ffn_reference(FfnKind kind, bool residual, const HostTensor& x,
                                  const FfnWeights& w) {
  // fp64, with nothing rounded in between.
  const bool gelu = kind == FfnKind::GeluMlp;
  const std::int64_t t = x.shape[0], h = x.shape[1], i_size = w.w1.shape[0];
  std::vector<double> hid(static_cast<std::size_t>(t * i_size)),
      ref(static_cast<std::size_t>(t * h));
  auto dot = [&](const HostTensor& a, std::int64_t row, const HostTensor& weight,
                 std::int64_t w_row, std::int64_t n) {
    double sum = 0;
    for (std::int64_t k = 0; k < n; ++k)
      sum += a.get(a.offset(0, row, k)) * weight.get(weight.offset(0, w_row, k));
    return sum;
  };
  for (std::int64_t r = 0; r < t; ++r)
    for (std::int64_t j = 0; j < i_size; ++j)
      hid[static_cast<std::size_t>(r * i_size + j)] =
          gelu ? activation_ref(GE2_ACT_GELU_ERF, dot(x, r, w.w1, j, h) + w.b1.get(j))
               : activation_ref(GE2_ACT_SILU, dot(x, r, w.w1, j, h)) * dot(x, r, w.w3, j, h);
  for (std::int64_t r = 0; r < t; ++r)
    for (std::int64_t j = 0; j < h; ++j) {
      double sum = gelu ? w.b2.get(j) : 0.0;
      for (std::int64_t k = 0; k < i_size; ++k)
        sum += hid[static_cast<std::size_t>(r * i_size + k)] * w.w2.get(w.w2.offset(0, j, k));
      ref[static_cast<std::size_t>(r * h + j)] = sum + (residual ? x.get(x.offset(0, r, j)) : 0.0);
    }
  return ref;
}

GemmResult run_ffn_case(ge2_context_t* context, Memory& memory, const FfnCase& c) {
  INFO(c.label());
  FfnWeights w = make_ffn_weights(c.dtype, c.hidden, c.intermediate);
  HostTensor x = make_tensor(c.dtype, {c.tokens, c.hidden});
  fill_random(x);
  HostTensor y = make_tensor(c.dtype, {c.tokens, c.hidden});
  poison(y);

  GraphPtr graph = make_graph();
  std::vector<ge2_binding_t> bindings;
  auto input = [&](const char* name, HostTensor& tensor) {
    const ge2_tensor_desc_t desc = tensor.desc();
    ge2_value_t v;
    GE2_CHECK(ge2_graph_add_input(graph.get(), name, &desc, &v));
    bindings.push_back({name, memory.upload(tensor)});
    return v;
  };
  // Weights: inputs bound per execution, or constants copied from host memory now.
  auto parameter = [&](const char* name, HostTensor& tensor) {
    if (!c.constant_weights) return input(name, tensor);
    const ge2_tensor_desc_t desc = tensor.desc();
    ge2_value_t v;
    GE2_CHECK(ge2_graph_add_constant(graph.get(), name, &desc, tensor.data(), &v));
    return v;
  };
  const ge2_value_t vx = input("x", x);
  const ge2_value_t out = add_ffn_block(graph.get(), c.kind, c.residual, vx, w, parameter);
  GE2_CHECK(ge2_graph_mark_output(graph.get(), out, "y", nullptr));
  PlanPtr plan = compile_plan(context, graph.get(), c.fuse);

  void* y_data = memory.upload(y);
  bindings.push_back({"y", y_data});
  // Constants were copied when they were added: the caller's buffers may change.
  const FfnWeights originals = w;
  if (c.constant_weights)
    for (HostTensor* t : {&w.w1, &w.w3, &w.w2, &w.b1, &w.b2}) poison(*t);
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings.data(), bindings.size(), memory.stream()));
  memory.download(y_data, y);

  GemmResult result;
  result.error = relative_error(y, ffn_reference(c.kind, c.residual, x, originals));
  const char* text = nullptr;
  GE2_CHECK(ge2_plan_describe(plan.get(), &text));
  result.plan_json = text;
  return result;
}

DynamicFfn::DynamicFfn(ge2_context_t* context, ge2_dtype_t dtype_, FfnKind kind_,
                       std::int64_t max_tokens, std::int64_t hidden, std::int64_t intermediate,
                       bool residual_, bool graph_replay)
    : dtype(dtype_),
      kind(kind_),
      residual(residual_),
      weights(make_ffn_weights(dtype_, hidden, intermediate)) {
  GraphPtr graph = make_graph();
  const ge2_tensor_desc_t x_desc{dtype, 2, {max_tokens, hidden}, {0, 0}};
  ge2_value_t x;
  GE2_CHECK(ge2_graph_add_dynamic_input(graph.get(), "x", &x_desc, &x));
  auto constant = [&](const char* name, HostTensor& tensor) {
    const ge2_tensor_desc_t desc = tensor.desc();
    ge2_value_t v;
    GE2_CHECK(ge2_graph_add_constant(graph.get(), name, &desc, tensor.data(), &v));
    return v;
  };
  const ge2_value_t out = add_ffn_block(graph.get(), kind, residual, x, weights, constant);
  GE2_CHECK(ge2_graph_mark_output(graph.get(), out, "y", nullptr));
  ge2_compile_options_t options;
  GE2_CHECK(ge2_compile_options_init(&options));
  options.graph_replay = graph_replay ? 1 : 0;
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph.get(), &options, &raw));
  plan.reset(raw);
}

double DynamicFfn::run(Memory& memory, std::int64_t tokens) {
  INFO("tokens = " << tokens);
  HostTensor x = make_tensor(dtype, {tokens, weights.w1.shape[1]});
  fill_random(x);
  HostTensor y = make_tensor(dtype, {tokens, weights.w1.shape[1]});
  poison(y);
  void* y_data = memory.upload(y);
  const ge2_binding_t bindings[] = {{"x", memory.upload(x)}, {"y", y_data}};
  GE2_CHECK(ge2_plan_execute_dynamic(plan.get(), tokens, bindings, 2, memory.stream()));
  memory.download(y_data, y);
  return relative_error(y, ffn_reference(kind, residual, x, weights));
}

std::string GluCase::label() const {
  return fmt::format(
      "glu {} act={} {}x{}x{} trans_b={} bias={} act_on_second={} constant={} "
      "fuse={} force={} x_offset={} pad_y={} y_offset={}",
      static_cast<int>(dtype), static_cast<int>(act), tokens, hidden, intermediate, trans_b, bias,
      act_on_second, constant_weights, fuse, force_kernel ? force_kernel : "-", x_offset, pad_y,
      y_offset);
}

GemmResult run_glu_case(ge2_context_t* context, Memory& memory, const GluCase& c) {
  INFO(c.label());
  const std::int64_t t = c.tokens, h = c.hidden, n = c.intermediate;
  HostTensor x = make_tensor(c.dtype, {t, h});
  fill_random(x);
  const double bound = 1.0 / std::sqrt(static_cast<double>(h));
  auto weight = [&] {
    HostTensor w = make_tensor(
        c.dtype, c.trans_b ? std::vector<std::int64_t>{n, h} : std::vector<std::int64_t>{h, n});
    fill_random(w, -bound, bound);
    return w;
  };
  HostTensor wg = weight(), wu = weight();
  HostTensor bg = make_tensor(c.dtype, {n}), bu = make_tensor(c.dtype, {n});
  fill_random(bg);
  fill_random(bu);
  HostTensor y =
      c.pad_y > 0 ? make_tensor(c.dtype, {t, n}, {n + c.pad_y, 1}) : make_tensor(c.dtype, {t, n});
  poison(y);

  GraphPtr graph = make_graph();
  std::vector<ge2_binding_t> bindings;
  auto parameter = [&](const char* name, HostTensor& tensor) {
    const ge2_tensor_desc_t desc = tensor.desc();
    ge2_value_t v;
    if (c.constant_weights) {
      GE2_CHECK(ge2_graph_add_constant(graph.get(), name, &desc, tensor.data(), &v));
    } else {
      GE2_CHECK(ge2_graph_add_input(graph.get(), name, &desc, &v));
      bindings.push_back({name, memory.upload(tensor)});
    }
    return v;
  };
  const ge2_tensor_desc_t dx = x.desc();
  ge2_value_t vx;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "x", &dx, &vx));
  // x_offset: x's bytes uploaded behind that many elements, the binding past them.
  HostTensor x_storage = make_tensor(c.dtype, {1, t * h + c.x_offset});
  for (std::int64_t i = 0; i < t * h; ++i) x_storage.set(c.x_offset + i, x.get(i));
  bindings.push_back({"x", static_cast<unsigned char*>(memory.upload(x_storage)) +
                               c.x_offset * static_cast<std::int64_t>(x.element_size())});
  ge2_gemm_attrs_t attrs;
  GE2_CHECK(ge2_gemm_attrs_init(&attrs));
  attrs.trans_b = c.trans_b;
  auto linear = [&](const char* w_name, HostTensor& w, const char* b_name, HostTensor& b) {
    ge2_value_t v;
    GE2_CHECK(ge2_graph_add_gemm(graph.get(), vx, parameter(w_name, w), GE2_NO_VALUE, &attrs, &v));
    if (c.bias) GE2_CHECK(ge2_graph_add_bias(graph.get(), v, parameter(b_name, b), &v));
    return v;
  };
  ge2_value_t gate = linear("w_gate", wg, "b_gate", bg);
  const ge2_value_t up = linear("w_up", wu, "b_up", bu);
  if (c.act != GE2_ACT_NONE) GE2_CHECK(ge2_graph_add_activation(graph.get(), gate, c.act, &gate));
  ge2_value_t out;
  GE2_CHECK(ge2_graph_add_elementwise(graph.get(), GE2_ELEMENTWISE_MUL, c.act_on_second ? up : gate,
                                      c.act_on_second ? gate : up, &out));
  const ge2_tensor_desc_t dy = y.desc();
  GE2_CHECK(ge2_graph_mark_output(graph.get(), out, "y", c.pad_y > 0 ? &dy : nullptr));
  // y_offset: y's bytes behind that many poisoned elements, the binding past them.
  const std::size_t y_skip = static_cast<std::size_t>(c.y_offset) * y.element_size();
  HostTensor y_storage = make_tensor(c.dtype, {1, y.span() + c.y_offset});
  poison(y_storage);
  void* y_data = memory.upload(y_storage);
  bindings.push_back({"y", static_cast<unsigned char*>(y_data) + y_skip});
  ge2_compile_options_t options;
  GE2_CHECK(ge2_compile_options_init(&options));
  options.fuse = c.fuse;
  options.force_kernel = c.force_kernel;
  ge2_plan_t* raw_plan = nullptr;
  // Executed right after compiling (every input uploaded before): nothing of the test orders
  // the plan's compile-time copies before its first execution on memory.stream().
  GE2_CHECK(ge2_plan_compile(context, graph.get(), &options, &raw_plan));
  PlanPtr plan(raw_plan);
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings.data(), bindings.size(), memory.stream()));
  memory.download(y_data, y_storage);
  std::memcpy(y.bytes.data(), y_storage.bytes.data() + y_skip, y.bytes.size());

  std::vector<double> ref(static_cast<std::size_t>(t * n)), pre(ref.size());
  auto w_at = [&](const HostTensor& w, std::int64_t k, std::int64_t j) {
    return c.trans_b ? w.get(w.offset(0, j, k)) : w.get(w.offset(0, k, j));
  };
  for (std::int64_t r = 0; r < t; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      double g = c.bias ? bg.get(j) : 0.0, u = c.bias ? bu.get(j) : 0.0;
      for (std::int64_t k = 0; k < h; ++k) {
        g += x.get(x.offset(0, r, k)) * w_at(wg, k, j);
        u += x.get(x.offset(0, r, k)) * w_at(wu, k, j);
      }
      const auto at = static_cast<std::size_t>(r * n + j);
      ref[at] = activation_ref(c.act, g) * u;
      pre[at] = g * u;
    }
  GemmResult result;
  result.error = relative_error(y, ref, &pre);
  result.padding_changed = padding_changed(y);
  for (std::int64_t i = 0; i < c.y_offset; ++i)  // the elements before y
    if (!std::isnan(y_storage.get(i))) ++result.padding_changed;
  const char* text = nullptr;
  GE2_CHECK(ge2_plan_describe(plan.get(), &text));
  result.plan_json = text;
  return result;
}

ElementwiseResult run_elementwise_case(ge2_context_t* context, Memory& memory, ge2_dtype_t dtype,
                                       ge2_elementwise_op_t op,
                                       const std::vector<std::int64_t>& a_shape,
                                       const std::vector<std::int64_t>& b_shape, bool padded_out) {
  HostTensor a = make_tensor(dtype, a_shape), b = make_tensor(dtype, b_shape);
  fill_random(a);
  fill_random(b);
  // A padded output layout: rows 3 elements longer than the logical row.
  std::vector<std::int64_t> out_strides;
  if (padded_out) {
    const std::int64_t ld = a_shape.back() + 3;
    out_strides = a_shape.size() == 3 ? std::vector<std::int64_t>{a_shape[1] * ld, ld, 1}
                                      : std::vector<std::int64_t>{ld, 1};
  }
  HostTensor out = make_tensor(dtype, a_shape, out_strides);
  poison(out);
  auto graph = make_graph();
  const ge2_tensor_desc_t da = a.desc(), db = b.desc(), dout = out.desc();
  ge2_value_t va, vb, vy;
  GE2_CHECK(ge2_graph_add_input(graph.get(), "a", &da, &va));
  GE2_CHECK(ge2_graph_add_input(graph.get(), "b", &db, &vb));
  GE2_CHECK(ge2_graph_add_elementwise(graph.get(), op, va, vb, &vy));
  GE2_CHECK(ge2_graph_mark_output(graph.get(), vy, "y", padded_out ? &dout : nullptr));
  ge2_plan_t* raw = nullptr;
  GE2_CHECK(ge2_plan_compile(context, graph.get(), nullptr, &raw));
  PlanPtr plan(raw);
  ge2_binding_t bindings[] = {
      {"a", memory.upload(a)}, {"b", memory.upload(b)}, {"y", memory.upload(out)}};
  GE2_CHECK(ge2_plan_execute(plan.get(), bindings, 3, memory.stream()));
  memory.download(bindings[2].data, out);
  // fp64 of the fp32 arithmetic, one rounding to the output dtype.
  const std::int64_t batch = a.rank == 3 ? a.shape[0] : 1;
  const std::int64_t rows = a.shape[a.rank - 2], cols = a.shape[a.rank - 1];
  std::vector<double> ref;
  for (std::int64_t z = 0; z < batch; ++z)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        const double x = a.get(a.offset(z, i, j));
        const double y = b.rank == 1   ? b.get(j)
                         : b.rank == 2 ? b.get(b.offset(0, i, j))
                                       : b.get(b.offset(z, i, j));
        ref.push_back(op == GE2_ELEMENTWISE_ADD ? x + y : x * y);
      }
  ElementwiseResult result;
  result.error = relative_error(out, ref);
  // The padding after every row but the last (the allocation ends with the last row).
  if (padded_out)
    for (std::int64_t z = 0; z < batch; ++z)
      for (std::int64_t i = 0; i < rows; ++i)
        if (z < batch - 1 || i < rows - 1)
          result.padding_intact =
              result.padding_intact && std::isnan(out.get(out.offset(z, i, cols)));
  return result;
}

}  // namespace ge2::test
