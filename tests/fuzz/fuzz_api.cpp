// libFuzzer target: arbitrary sequences of C API calls on the CPU backend.
// Every call must return a status (never crash, hang or leak); compiled plans
// with small tensors are executed on poisoned buffers.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ge_v2_api.h"

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
  // Mostly small sizes, sometimes raw values to exercise validation.
  std::int64_t size() {
    const std::uint8_t mode = u8();
    if (mode < 200) return 1 + (u8() % 48);
    if (mode < 230) return static_cast<std::int64_t>(u8()) - 128;
    return i64();
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

ge2_tensor_desc_t read_desc(Bytes& in) {
  ge2_tensor_desc_t d{};
  d.dtype = static_cast<ge2_dtype_t>(in.u8() % 5);
  d.rank = static_cast<int32_t>(in.u8() % 5);
  for (int i = 0; i < 3; ++i) d.shape[i] = in.size();
  if (in.u8() % 4 == 0)
    for (int i = 0; i < 3; ++i) d.strides[i] = in.size();
  return d;
}

void run_plan(ge2_plan_t* plan, Bytes& in) {
  size_t count = 0;
  if (ge2_plan_io_count(plan, &count) != GE2_OK) return;
  std::vector<std::vector<std::uint8_t>> buffers;
  std::vector<ge2_binding_t> bindings;
  std::size_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    ge2_io_info_t info;
    if (ge2_plan_io_info(plan, i, &info) != GE2_OK) return;
    total += info.required_bytes;
    if (total > (std::size_t{16} << 20)) return;
    buffers.emplace_back(info.required_bytes, static_cast<std::uint8_t>(in.u8() & 0x3f));
    bindings.push_back({info.name, buffers.back().data()});
  }
  if (in.u8() % 8 == 0 && !bindings.empty()) bindings.pop_back();  // a missing binding
  ge2_plan_execute(plan, bindings.data(), bindings.size(), nullptr);
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
  p.dtype = static_cast<ge2_dtype_t>(1 + in.u8() % 3);
  p.activation = static_cast<ge2_activation_t>(in.u8() % 5);
  p.has_bias = in.u8() % 2;
  // Buffers sized for the largest valid case of these parameters, or skipped.
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.lda < 0 ||
      p.ldd < 0) {  // must be rejected before any access
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
  static ge2_context_t* context = [] {
    ge2_context_options_t options;
    ge2_context_options_init(&options);
    options.device = GE2_DEVICE_CPU;
    options.tunedb_path = "";
    ge2_context_t* c = nullptr;
    ge2_context_create(GE2_API_VERSION, &options, &c);
    return c;
  }();
  Bytes in(data, size);
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
    switch (in.u8() % 8) {
      case 0:
      case 1: {
        ge2_tensor_desc_t d = read_desc(in);
        status = ge2_graph_add_input(graph, name, &d, &out);
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
      case 4:
        status = ge2_graph_add_activation(graph, pick(), static_cast<ge2_activation_t>(in.u8() % 6),
                                          &out);
        break;
      case 5: {
        const ge2_value_t a = pick(), b = pick();
        status =
            ge2_graph_add_gemm_bias_act(graph, a, b, in.u8() % 2 ? pick() : GE2_NO_VALUE, &attrs,
                                        static_cast<ge2_activation_t>(in.u8() % 5), &out);
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
    }
    if (status == GE2_OK && out != GE2_NO_VALUE) values.push_back(out);
  }
  if (small) {
    ge2_compile_options_t options;
    ge2_compile_options_init(&options);
    options.fuse = in.u8() % 2;
    options.graph_replay = in.u8() % 2;
    // A 2.0 caller's shorter struct, or one too short for any version.
    switch (in.u8() % 3) {
      case 1:
        options.struct_size =
            static_cast<std::uint32_t>(offsetof(ge2_compile_options_t, graph_replay));
        break;
      case 2:
        options.struct_size = in.u8();
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
