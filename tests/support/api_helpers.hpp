// RAII owners for the C API's handles, and a GEMM case runner that both the
// CPU and the GPU suites use (with host or device memory).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ge_v2_api.h"
#include "support/reference.hpp"

// Fails the enclosing doctest case with ge2's message unless the call returns GE2_OK.
#define GE2_CHECK(call) REQUIRE_MESSAGE((call) == GE2_OK, std::string(ge2_last_error()))

namespace ge2::test {

struct ContextDeleter {
  void operator()(ge2_context_t* c) const { ge2_context_destroy(c); }
};
struct GraphDeleter {
  void operator()(ge2_graph_t* g) const { ge2_graph_destroy(g); }
};
struct PlanDeleter {
  void operator()(ge2_plan_t* p) const { ge2_plan_destroy(p); }
};
using ContextPtr = std::unique_ptr<ge2_context_t, ContextDeleter>;
using GraphPtr = std::unique_ptr<ge2_graph_t, GraphDeleter>;
using PlanPtr = std::unique_ptr<ge2_plan_t, PlanDeleter>;

ContextPtr make_context(ge2_device_kind_t device);
// A context in `mode` with its tuning database at `tunedb_path`.
ContextPtr make_tuning_context(ge2_device_kind_t device, ge2_tune_mode_t mode,
                               const std::string& tunedb_path);
GraphPtr make_graph();
// A call expected to fail: its status is `want` and ge2_last_error() contains `fragment`.
void expect_refusal(ge2_status_t got, ge2_status_t want, const char* fragment);
// ge2_gemm_bias_act's parameters at their defaults (tight leading dimensions, no
// transpose, bias or activation) for an M x N x K GEMM in `dtype`.
ge2_gemm_params_t gemm_params(ge2_dtype_t dtype, std::int64_t m, std::int64_t n, std::int64_t k);

// Where tensors live during execution: host memory, or device memory in GPU tests.
class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* upload(HostTensor& t) = 0;                  // returns the pointer to bind
  virtual void download(void* pointer, HostTensor& t) = 0;  // copies results back
  virtual void* stream() { return nullptr; }
};
std::unique_ptr<Memory> host_memory();

struct GemmCase {
  ge2_dtype_t dtype = GE2_DTYPE_F32;
  std::int64_t m = 1, n = 1, k = 1, batch = 1;  // batch > 1 makes rank-3 operands
  bool shared_b = false;  // with batch > 1: B stays rank 2, one weight for every batch
  bool trans_a = false, trans_b = false;
  bool has_bias = false;
  ge2_activation_t act = GE2_ACT_NONE;
  bool fused_node = true;  // one GEMM_BIAS_ACT node, or GEMM -> bias -> act for the fusion pass
  std::int64_t pad_lda = 0, pad_ldb = 0, pad_ldd = 0;  // extra elements per row
  bool a_column_major = false;  // store A with unit row stride (a transposed view)
  bool with_c = false;          // D = alpha*AB + beta*C (unfused GEMM node only)
  float alpha = 1.0f, beta = 0.0f;
  const char* force_kernel = nullptr;
  bool allow_tf32 = false;
  bool allow_staging = true;
  bool fuse = true;  // compile option: false keeps GEMM, bias and activation as separate steps
  bool graph_replay = false;              // compile option
  std::uint32_t options_struct_size = 0;  // 0: as ge2_compile_options_init sets it
  std::string label() const;
};

struct GemmResult {
  double error = 0;
  std::string plan_json;
  // Elements of D's allocation outside its logical view (row padding) that the
  // execution changed: they were poisoned with NaN and must stay so.
  std::int64_t padding_changed = 0;
};

struct ElementwiseResult {
  double error = 0;            // relative error against fp64
  bool padding_intact = true;  // the padding of a padded output stayed poisoned
};
// y = a (op) b with b broadcast; a padded output layout when `padded_out`.
ElementwiseResult run_elementwise_case(ge2_context_t* context, Memory& memory, ge2_dtype_t dtype,
                                       ge2_elementwise_op_t op,
                                       const std::vector<std::int64_t>& a_shape,
                                       const std::vector<std::int64_t>& b_shape, bool padded_out);

// Compiles `graph` with default options but `fuse`.
PlanPtr compile_plan(ge2_context_t* context, const ge2_graph_t* graph, bool fuse);

// A transformer feed-forward block in PyTorch's nn.Linear layout (weights
// [out, in], so every GEMM is x * W^T), with an optional residual:
//   GeluMlp: y = W2 gelu_erf(W1 x + b1) + b2 (+ x)
//   SwiGlu:  y = Wd (silu(Wg x) * (Wu x))    (+ x)
enum class FfnKind { GeluMlp, SwiGlu };
struct FfnCase {
  ge2_dtype_t dtype = GE2_DTYPE_F32;
  FfnKind kind = FfnKind::GeluMlp;
  std::int64_t tokens = 1, hidden = 8, intermediate = 16;
  bool residual = true;
  bool fuse = true;
  bool constant_weights = false;  // weights and biases given once as constants
  std::string label() const;
};
// Every dtype x kind x residual x fusion at one size; half of them (residual ==
// fuse) with the weights as constants.
std::vector<FfnCase> ffn_cases(std::int64_t tokens, std::int64_t hidden, std::int64_t intermediate);

// Builds, compiles and runs the block on fresh random data; returns the
// relative error of y against an fp64 reference (GemmResult's fields).
GemmResult run_ffn_case(ge2_context_t* context, Memory& memory, const FfnCase& c);

// An FFN block's parameters on fresh random data: w1 (W1 or W_gate) and w3
// (W_up) [intermediate, hidden], w2 [hidden, intermediate], biases b1, b2.
struct FfnWeights {
  HostTensor w1, w3, w2, b1, b2;
};
FfnWeights make_ffn_weights(ge2_dtype_t dtype, std::int64_t hidden, std::int64_t intermediate);
// Adds the block on x to `graph` and returns y; `parameter` adds each weight
// (as an input or a constant) under its name.
ge2_value_t add_ffn_block(ge2_graph_t* graph, FfnKind kind, bool residual, ge2_value_t x,
                          FfnWeights& weights,
                          const std::function<ge2_value_t(const char*, HostTensor&)>& parameter);
// The block's y for x [tokens, hidden] in fp64, dense [tokens, hidden].
std::vector<double> ffn_reference(FfnKind kind, bool residual, const HostTensor& x,
                                  const FfnWeights& weights);

// The block compiled once with x's token count dynamic (bound max_tokens) and
// constant weights; run() executes it at any token count.
struct DynamicFfn {
  DynamicFfn(ge2_context_t* context, ge2_dtype_t dtype, FfnKind kind, std::int64_t max_tokens,
             std::int64_t hidden, std::int64_t intermediate, bool residual,
             bool graph_replay = false);
  // Runs at `tokens` on fresh random x with x and y sized for exactly that many
  // rows (y poisoned); returns y's relative error against fp64.
  double run(Memory& memory, std::int64_t tokens);

  ge2_dtype_t dtype;
  FfnKind kind;
  bool residual;
  FfnWeights weights;
  PlanPtr plan;
};

// A gated linear unit y = act(x Wg + bg) * (x Wu + bu) with constant weights,
// the pattern the gate/up concatenation pass turns into one GEMM of width 2I
// and one gated_mul pass.
struct GluCase {
  ge2_dtype_t dtype = GE2_DTYPE_F32;
  ge2_activation_t act = GE2_ACT_SILU;
  std::int64_t tokens = 3, hidden = 8, intermediate = 16;
  bool trans_b = true;           // nn.Linear's [out, in] weights, else [in, out]
  bool bias = false;             // bias adds after both GEMMs
  bool act_on_second = false;    // mul(up, act(gate)) instead of mul(act(gate), up)
  bool constant_weights = true;  // inputs instead leave the GEMMs apart
  bool fuse = true;
  const char* force_kernel = nullptr;  // compile option force_kernel
  std::int64_t x_offset = 0;           // x bound this many elements past an aligned pointer
  std::int64_t pad_y = 0;              // y's rows this many elements longer (padding checked)
  std::int64_t y_offset = 0;           // y bound this many elements past an aligned pointer
  std::string label() const;
};
// error: y against fp64; padding_changed: y's row padding elements written.
GemmResult run_glu_case(ge2_context_t* context, Memory& memory, const GluCase& c);

// One nn.Linear layer, d = act(a bᵀ + bias), as a compiled plan with inputs
// "a" [m, k], "b" [n, k], "bias" [n] and output "d" [m, n]: fresh random
// inputs, d poisoned, the fp64 reference of d. force_kernel may be nullptr.
struct LinearLayer {
  HostTensor a, b, bias, d;
  PlanPtr plan;
  std::vector<double> reference;
};
LinearLayer make_linear_layer(ge2_context_t* context, ge2_dtype_t dtype, std::int64_t m,
                              std::int64_t n, std::int64_t k, ge2_activation_t act,
                              const char* force_kernel);

// Compiles (without fusion) a graph whose [2^20, cols] f32 intermediate is far
// too large for any memory: an out-of-memory path that must end in a status.
ge2_status_t compile_with_huge_intermediate(ge2_context_t* context, std::int64_t cols,
                                            ge2_plan_t** plan);

// Builds, compiles and runs the case on fresh random data; returns the error
// against the fp64 reference. Fails the enclosing doctest case on any status.
GemmResult run_gemm_case(ge2_context_t* context, Memory& memory, const GemmCase& c);

}  // namespace ge2::test
