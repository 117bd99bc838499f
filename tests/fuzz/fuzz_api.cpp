// libFuzzer target: arbitrary sequences of C API calls on the CPU backend.
// Every call must return a status (never crash, hang or leak); compiled plans
// with small tensors are executed on poisoned buffers.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <vector>

#include <nlohmann/json.hpp>

#include "ge_v2_api.h"
#include "support/raw_enum_calls.h"

namespace {

class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::int64_t i64() {
    std::int64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | u8();
    return v;
  }
  std::int32_t i32() { return static_cast<std::int32_t>(static_cast<std::uint32_t>(i64())); }
  // Mostly small sizes, sometimes powers of two up to 2^40 (whose products
  // overflow: batch * M * N) or raw values, to exercise validation.
  std::int64_t size() {
    const std::uint8_t mode = u8();
    if (mode < 190) return 1 + (u8() % 48);
    if (mode < 215) return static_cast<std::int64_t>(u8()) - 128;
    if (mode < 240) return std::int64_t{1} << (u8() % 41);
    return i64();
  }
  // A C enum argument: usually a valid value, sometimes any int (negative, huge).
  int enum_value(int valid_count) { return u8() < 224 ? u8() % (valid_count + 1) : i32(); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

ge2_tensor_desc_t read_desc(Bytes& in) {
  ge2_tensor_desc_t d{};
  raw_set_dtype(&d, in.enum_value(5));
  d.rank = static_cast<int32_t>(in.u8() % 5);
  for (int i = 0; i < 3; ++i) d.shape[i] = in.size();
  if (in.u8() % 4 == 0)
    for (int i = 0; i < 3; ++i) d.strides[i] = in.size();
  return d;
}

// Executes with bindings built from the plan's own io list, then mutated: a
// missing, renamed, NULL or repeated binding, a count larger than the array
// (which is allocated to its exact size, so ASan sees any read past it), or an
// output bound onto another binding's memory.
// The bytes a description spans when it is plausible and at most 1 MiB, else 0.
std::int64_t span_bytes_if_small(const ge2_tensor_desc_t& d) {
  if (d.rank < 1 || d.rank > 3) return 0;
  std::int64_t dtype = 0;
  std::memcpy(&dtype, &d.dtype, sizeof(int));
  const std::int64_t size = (dtype & 0xffffffff) == GE2_DTYPE_F32 ? 4 : 2;
  bool dense = true;
  for (int i = 0; i < d.rank; ++i) {
    if (d.shape[i] < 1 || d.shape[i] > 4096 || d.strides[i] < 0 || d.strides[i] > 4096) return 0;
    dense = dense && d.strides[i] == 0;
  }
  std::int64_t elements = 1, last = 0;
  for (int i = 0; i < d.rank; ++i) {
    elements *= d.shape[i];
    last += (d.shape[i] - 1) * d.strides[i];
  }
  const std::int64_t span = dense ? elements : last + 1;
  return span * size <= (1 << 20) ? span * size : 0;
}

// Whether the plan's work is small enough to execute here: the CPU reference
// backend under ASan and coverage instrumentation ran a 4096x4096x64 GEMM (an
// intermediate of a plan whose inputs and outputs are small) for more than five
// minutes, a slow unit and no finding. At most 2^26 multiply-adds over all GEMM
// steps and 16 MiB of intermediates (those bound elementwise steps).
bool small_work(ge2_plan_t* plan) {
  const char* text = nullptr;
  if (ge2_plan_describe(plan, &text) != GE2_OK) return false;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !(j.value("intermediate_bytes", 0.0) <= 16.0 * (1 << 20))) return false;
  double multiply_adds = 0;
  for (const auto& step : j.value("steps", nlohmann::json::array())) {
    if (!step.contains("problem")) continue;
    const nlohmann::json& p = step["problem"];
    multiply_adds +=
        p.value("m", 0.0) * p.value("n", 0.0) * p.value("k", 0.0) * p.value("batch", 1.0);
  }
  return multiply_adds <= static_cast<double>(1 << 26);
}

void run_plan(ge2_plan_t* plan, Bytes& in) {
  if (!small_work(plan)) return;
  size_t count = 0;
  if (ge2_plan_io_count(plan, &count) != GE2_OK) return;
  // A dynamic plan runs at an extent in [0, bound + 1] (both ends refused), its
  // dynamic buffers sized for exactly that extent's rows.
  std::int64_t bound = 0;
  if (ge2_plan_get_max_extent(plan, &bound) != GE2_OK) return;
  const std::int64_t extent = bound > 0 ? in.u8() % (bound + 2) : 0;
  std::vector<std::vector<std::uint8_t>> buffers;
  std::vector<ge2_binding_t> bindings;
  std::vector<int> is_output;
  std::size_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    ge2_io_info_t info;
    int dynamic = 0;
    if (ge2_plan_io_info(plan, i, &info) != GE2_OK ||
        ge2_plan_io_is_dynamic(plan, i, &dynamic) != GE2_OK)
      return;
    std::size_t bytes = info.required_bytes;
    if (dynamic && extent >= 1 && extent <= bound) {
      const std::size_t element = info.desc.dtype == GE2_DTYPE_F32 ? 4 : 2;
      bytes -= static_cast<std::size_t>((bound - extent) * info.desc.strides[0]) * element;
    }
    total += bytes;
    if (total > (std::size_t{16} << 20)) return;
    buffers.emplace_back(bytes, static_cast<std::uint8_t>(in.u8() & 0x3f));
    bindings.push_back({info.name, buffers.back().data()});
    is_output.push_back(info.is_output);
  }
  std::size_t passed = bindings.size();
  const std::uint8_t mutation = in.u8() % 16;
  if (!bindings.empty()) {
    const std::size_t victim = in.u8() % bindings.size(), other = in.u8() % bindings.size();
    switch (mutation) {
      case 0:
        bindings.pop_back();
        passed = bindings.size();
        break;
      case 1:
        bindings[victim].name = "no_such_value";
        break;
      case 2:
        bindings[victim].name = nullptr;
        break;
      case 3:
        bindings[victim].data = nullptr;
        break;
      case 4:
        bindings[victim].name = bindings[other].name;
        break;
      case 5:
        passed = bindings.size() + 1 + in.u8() % 4;  // more than the array holds
        break;
      case 6:  // an output onto another binding's memory (which is at least as large or not)
        if (is_output[victim] && victim != other) bindings[victim].data = bindings[other].data;
        break;
      default:
        break;
    }
  }
  // Exactly sized heap copy: a read past bindings[passed - 1] is a finding.
  std::vector<ge2_binding_t> exact(bindings.begin(), bindings.end());
  if (bound > 0)
    ge2_plan_execute_dynamic(plan, extent, exact.empty() ? nullptr : exact.data(), passed, nullptr);
  else
    ge2_plan_execute(plan, exact.empty() ? nullptr : exact.data(), passed, nullptr);
  const char* text = nullptr;
  ge2_plan_describe(plan, &text);
}

void one_shot(ge2_context_t* context, Bytes& in) {
  ge2_gemm_params_t p;
  ge2_gemm_params_init(&p);
  p.m = in.size();
  p.n = in.size();
  p.k = in.size();
  p.batch = 1 + in.u8() % 3;
  p.trans_a = in.u8() % 3;
  p.trans_b = in.u8() % 2;
  p.lda = in.u8() % 4 == 0 ? in.size() : 0;
  p.ldd = in.u8() % 4 == 0 ? in.size() : 0;
  const int dtype = in.u8() < 240 ? 1 + in.u8() % 3 : in.i32();
  raw_set_params_enums(&p, dtype, in.enum_value(GE2_ACT_QUICK_GELU + 1));
  p.has_bias = in.u8() % 2;
  // Buffers sized for the largest valid case of these parameters, or skipped.
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.lda < 0 || p.ldd < 0 || dtype < 1 ||
      dtype > 3) {  // must be rejected before any access
    std::vector<float> tiny(16);
    ge2_gemm_bias_act(context, &p, tiny.data(), tiny.data(), p.has_bias ? tiny.data() : nullptr,
                      tiny.data(), nullptr);
    return;
  }
  if (p.m > 64 || p.n > 64 || p.k > 64 || p.lda > 64 || p.ldd > 64)
    return;  // larger than the buffers below
  std::vector<float> a(64 * 64 * 3, 0.5f), b(64 * 64 * 3, 0.25f), bias(64, 0.1f), d(64 * 64 * 3);
  ge2_gemm_bias_act(context, &p, a.data(), b.data(), p.has_bias ? bias.data() : nullptr, d.data(),
                    nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A small one-shot cache, so that eviction runs too.
  static ge2_context_t* context = [] {
    ge2_context_options_t options;
    ge2_context_options_init(&options);
    options.device = GE2_DEVICE_CPU;
    options.tunedb_path = "";
    options.one_shot_cache_size = 4;
    ge2_context_t* c = nullptr;
    ge2_context_create(GE2_API_VERSION, &options, &c);
    return c;
  }();
  Bytes in(data, size);
  {  // Context options with any enum values and struct sizes (the fuzz build has no CUDA).
    ge2_context_options_t options;
    ge2_context_options_init(&options);
    raw_set_device(&options, in.u8() < 200 ? GE2_DEVICE_CPU : in.enum_value(3));
    raw_set_tune_mode(&options, in.enum_value(3));
    options.tunedb_path = "";
    if (in.u8() % 8 == 0) options.struct_size = in.u8();
    ge2_context_t* extra = nullptr;
    if (ge2_context_create(GE2_API_VERSION, &options, &extra) == GE2_OK) {
      const char* text = nullptr;
      ge2_context_describe(extra, &text);
      ge2_context_destroy(extra);
    }
  }
  ge2_graph_t* graph = nullptr;
  if (ge2_graph_create(&graph) != GE2_OK) return 0;
  std::vector<ge2_value_t> values;
  bool small = true;
  int names = 0;
  auto pick = [&]() -> ge2_value_t {
    const std::uint8_t r = in.u8();
    if (values.empty() || r == 255)
      return static_cast<ge2_value_t>(static_cast<std::int8_t>(in.u8()));
    return values[r % values.size()];
  };
  for (int step = 0; step < 24 && !in.empty(); ++step) {
    ge2_value_t out = GE2_NO_VALUE;
    ge2_gemm_attrs_t attrs;
    ge2_gemm_attrs_init(&attrs);
    attrs.trans_a = in.u8() % 3;
    attrs.trans_b = in.u8() % 2;
    attrs.beta = in.u8() % 4 == 0 ? 1.0f : 0.0f;
    char name[16];
    std::snprintf(name, sizeof(name), "v%d", names++ % 6);
    ge2_status_t status = GE2_OK;
    switch (in.u8() % 12) {
      case 0:
      case 1: {
        ge2_tensor_desc_t d = read_desc(in);
        status = in.u8() % 4 == 0 ? ge2_graph_add_dynamic_input(graph, name, &d, &out)
                                  : ge2_graph_add_input(graph, name, &d, &out);
        if (status == GE2_OK && d.rank >= 1) {
          std::int64_t elements = 1;
          for (int i = 0; i < d.rank && i < 3; ++i) elements *= d.shape[i] > 0 ? d.shape[i] : 1;
          if (elements > (1 << 14)) small = false;
        }
        break;
      }
      case 2: {
        const ge2_value_t a = pick(), b = pick();
        status = ge2_graph_add_gemm(graph, a, b, in.u8() % 3 == 0 ? pick() : GE2_NO_VALUE,
                                    in.u8() % 5 ? &attrs : nullptr, &out);
        break;
      }
      case 3:
        status = ge2_graph_add_bias(graph, pick(), pick(), &out);
        break;
      case 4: {
        const ge2_value_t x = pick();
        status = raw_graph_add_activation(graph, x, in.enum_value(GE2_ACT_QUICK_GELU + 1), &out);
        break;
      }
      case 5: {
        const ge2_value_t a = pick(), b = pick();
        const ge2_value_t bias = in.u8() % 2 ? pick() : GE2_NO_VALUE;
        status = raw_graph_add_gemm_bias_act(graph, a, b, bias, in.enum_value(5), &out);
        break;
      }
      case 6: {
        ge2_tensor_desc_t layout = read_desc(in);
        ge2_graph_mark_output(graph, pick(), name, in.u8() % 3 == 0 ? &layout : nullptr);
        break;
      }
      case 7:
        if (small) one_shot(context, in);
        break;
      case 8: {  // a constant, with a buffer as large as its description says when that is small
        const ge2_tensor_desc_t d = read_desc(in);
        const std::int64_t bytes = span_bytes_if_small(d);
        std::vector<std::uint8_t> data(static_cast<std::size_t>(bytes > 0 ? bytes : 1), in.u8());
        status = ge2_graph_add_constant(graph, name, &d, bytes > 0 ? data.data() : nullptr, &out);
        break;
      }
      case 9: {
        const ge2_value_t a = pick(), b = pick();
        status = raw_graph_add_elementwise(graph, in.enum_value(2), a, b, &out);
        break;
      }
      case 10: {  // a gated unit act(a·Wg) * (a·Wu) with constant weights of one description,
                  // the pattern the gate/up concatenation pass joins; the weights fit a's K
        const ge2_value_t a = pick();
        ge2_tensor_desc_t a_desc;
        if (ge2_graph_get_desc(graph, a, &a_desc) != GE2_OK || a_desc.rank < 2) break;
        const std::int64_t k = a_desc.shape[a_desc.rank - 1], n = 1 + in.u8() % 9;
        attrs.trans_a = 0;
        attrs.beta = 0.0f;
        ge2_tensor_desc_t d{a_desc.dtype, 2, {attrs.trans_b ? n : k, attrs.trans_b ? k : n}, {}};
        const std::int64_t bytes = span_bytes_if_small(d);
        if (bytes <= 0) break;
        std::vector<std::uint8_t> gate_data(static_cast<std::size_t>(bytes), in.u8()),
            up_data(static_cast<std::size_t>(bytes), in.u8());
        char gate_name[24], up_name[24];
        std::snprintf(gate_name, sizeof(gate_name), "g%d", names);
        std::snprintf(up_name, sizeof(up_name), "u%d", names++);
        ge2_value_t wg = GE2_NO_VALUE, wu = GE2_NO_VALUE, g = GE2_NO_VALUE, u = GE2_NO_VALUE;
        if (ge2_graph_add_constant(graph, gate_name, &d, gate_data.data(), &wg) != GE2_OK ||
            ge2_graph_add_constant(graph, up_name, &d, up_data.data(), &wu) != GE2_OK ||
            ge2_graph_add_gemm(graph, a, wg, GE2_NO_VALUE, &attrs, &g) != GE2_OK ||
            ge2_graph_add_gemm(graph, a, wu, GE2_NO_VALUE, &attrs, &u) != GE2_OK)
          break;
        if (in.u8() % 2)
          (void)raw_graph_add_activation(graph, g, in.enum_value(GE2_ACT_QUICK_GELU + 1), &g);
        status = in.u8() % 2 ? raw_graph_add_elementwise(graph, in.enum_value(2), g, u, &out)
                             : raw_graph_add_elementwise(graph, in.enum_value(2), u, g, &out);
        break;
      }
      case 11: {  // a quantized constant: codes (NaN codes included) and scales from the input
        const ge2_tensor_desc_t d = read_desc(in);
        const std::int64_t bytes = span_bytes_if_small(d);
        const std::int64_t elements = bytes > 0 ? d.shape[0] * (d.rank > 1 ? d.shape[1] : 1) : 1;
        std::vector<std::uint8_t> codes(static_cast<std::size_t>(elements > 0 ? elements : 1));
        for (auto& code : codes) code = in.u8();
        static constexpr float kScales[] = {
            1.0f, 0.01f, 300.0f, 0.0f, -2.0f, 1e30f, __builtin_nanf(""), __builtin_inff()};
        std::vector<float> scales(1 + in.u8() % 8);
        for (auto& scale : scales) scale = kScales[in.u8() % std::size(kScales)];
        const std::int64_t count = in.u8() % 3 == 0 ? static_cast<std::int64_t>(scales.size())
                                                    : static_cast<std::int8_t>(in.u8());
        if (count > static_cast<std::int64_t>(scales.size())) break;  // the caller's own bound
        const auto storage = static_cast<ge2_dtype_t>(in.u8() % 6);
        const std::uint8_t* data =
            elements > 0 && elements <= static_cast<std::int64_t>(codes.size()) ? codes.data()
                                                                                : nullptr;
        if (in.u8() % 2)  // blocks of any size, zero and negative included
          status = ge2_graph_add_block_quantized_constant(
              graph, name, &d, storage, data, scales.data(), count,
              static_cast<std::int8_t>(in.u8()), static_cast<std::int8_t>(in.u8()), &out);
        else
          status =
              ge2_graph_add_quantized_constant(graph, name, &d, storage, data, scales.data(), count,
                                               static_cast<std::int8_t>(in.u8()) % 3, &out);
        break;
      }
    }
    if (status == GE2_OK && out != GE2_NO_VALUE) values.push_back(out);
  }
  if (small) {
    ge2_compile_options_t options;
    ge2_compile_options_init(&options);
    options.fuse = in.u8() % 2;
    options.graph_replay = in.u8() % 2;
    // The FP8 policy (cpu_fp8_ref and its accuracy gate on this CPU-only build), with
    // budgets in and out of (0, 1].
    options.allow_fp8 = in.u8() % 2;
    static constexpr float kBudgets[] = {
        0.1f, 1.0f, 1e-6f, 0.0f, -1.0f, 2.0f, __builtin_nanf(""), __builtin_inff()};
    options.fp8_max_error = kBudgets[in.u8() % std::size(kBudgets)];
    // A 2.0 or 2.4 caller's shorter struct, or one too short for any version.
    switch (in.u8() % 4) {
      case 1:
        options.struct_size =
            static_cast<std::uint32_t>(offsetof(ge2_compile_options_t, graph_replay));
        break;
      case 2:
        options.struct_size = in.u8();
        break;
      case 3:
        options.struct_size =
            static_cast<std::uint32_t>(offsetof(ge2_compile_options_t, fp8_max_error));
        break;
      default:
        break;
    }
    ge2_plan_t* plan = nullptr;
    if (ge2_plan_compile(context, graph, &options, &plan) == GE2_OK) {
      run_plan(plan, in);
      ge2_plan_destroy(plan);
    }
  }
  ge2_graph_destroy(graph);
  return 0;
}
