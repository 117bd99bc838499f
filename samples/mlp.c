/*
** mlp.c — the main job: build a 3-layer MLP graph with ge2's C API, compile
** it, run it (on the GPU when there is one, else on the CPU backend), print
** the plan, the backend and the chosen kernels, and check the result against
** an fp64 reference computed here.
**
**   layer 1: h1 = GELU_erf(x  W1 + b1)   [batch, 512] x [512, 1024]
**   layer 2: h2 = ReLU    (h1 W2 + b2)   [batch, 1024] x [1024, 1024]
**   layer 3: y  =          h2 W3 + b3    [batch, 1024] x [1024, 256]
**
** Layers 1 and 2 are written as separate GEMM, bias and activation nodes; the
** fusion pass folds each chain into one GEMM_BIAS_ACT node.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ge_v2_api.h"

#define CHECK(call)                                                                                \
  do {                                                                                             \
    ge2_status_t status_ = (call);                                                                 \
    if (status_ != GE2_OK) {                                                                       \
      fprintf(stderr, "%s failed: %s: %s\n", #call, ge2_status_string(status_), ge2_last_error()); \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

enum { BATCH = 64, D_IN = 512, D_HIDDEN = 1024, D_OUT = 256, LAYERS = 3 };

/* IEEE half from float, round to nearest even (finite inputs in range). */
static uint16_t to_half(float value) {
  uint32_t x;
  memcpy(&x, &value, 4);
  uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (abs < 0x38800000u) return (uint16_t)(sign | (uint32_t)lrintf(fabsf(value) * 16777216.0f));
  return (uint16_t)(sign | ((abs + 0xfffu + ((abs >> 13) & 1u) - 0x38000000u) >> 13));
}

static double from_half(uint16_t h) {
  int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude = exponent == 0 ? ldexp(mantissa, -24) : ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

static double uniform(void) { return 2.0 * rand() / (double)RAND_MAX - 1.0; }

static uint16_t* random_half(size_t count, double scale) {
  uint16_t* data = malloc(count * sizeof(uint16_t));
  for (size_t i = 0; i < count; ++i) data[i] = to_half((float)(scale * uniform()));
  return data;
}

static ge2_value_t add_input(ge2_graph_t* graph, const char* name, int rank, int64_t rows,
                             int64_t cols) {
  ge2_tensor_desc_t desc;
  ge2_value_t value;
  memset(&desc, 0, sizeof(desc));
  desc.dtype = GE2_DTYPE_F16;
  desc.rank = rank;
  desc.shape[0] = rows;
  desc.shape[1] = cols;
  CHECK(ge2_graph_add_input(graph, name, &desc, &value));
  return value;
}

/* fp64 reference of one layer: out = act(in W + b), from the stored fp16 values. */
static void reference_layer(const double* in, int64_t rows, int64_t k, int64_t n, const uint16_t* w,
                            const uint16_t* b, ge2_activation_t act, double* out) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = from_half(b[j]);
      for (int64_t kk = 0; kk < k; ++kk) acc += in[i * k + kk] * from_half(w[kk * n + j]);
      if (act == GE2_ACT_RELU) acc = acc > 0 ? acc : 0;
      if (act == GE2_ACT_GELU_ERF) acc = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
      out[i * n + j] = acc;
    }
}

int main(void) {
  const int64_t dims[LAYERS + 1] = {D_IN, D_HIDDEN, D_HIDDEN, D_OUT};
  const ge2_activation_t acts[LAYERS] = {GE2_ACT_GELU_ERF, GE2_ACT_RELU, GE2_ACT_NONE};
  const char* weight_names[LAYERS] = {"w1", "w2", "w3"};
  const char* bias_names[LAYERS] = {"b1", "b2", "b3"};
  ge2_context_t* context = NULL;
  ge2_graph_t* graph = NULL;
  ge2_plan_t* plan = NULL;
  const char* text = NULL;
  ge2_device_kind_t kind;
  int layer;
  srand(2026);

  if (ge2_get_api_version() != GE2_API_VERSION) {
    fprintf(stderr, "libge2 implements API version %d, this sample was built for %d\n",
            ge2_get_api_version(), GE2_API_VERSION);
    return 1;
  }
  CHECK(ge2_context_create(GE2_API_VERSION, NULL, &context));
  CHECK(ge2_context_get_device_kind(context, &kind));
  CHECK(ge2_context_describe(context, &text));
  printf("== context (backend: %s)\n%s\n", kind == GE2_DEVICE_CUDA ? "CUDA" : "CPU reference",
         text);

  CHECK(ge2_graph_create(&graph));
  ge2_value_t h = add_input(graph, "x", 2, BATCH, D_IN);
  for (layer = 0; layer < LAYERS; ++layer) {
    ge2_value_t w = add_input(graph, weight_names[layer], 2, dims[layer], dims[layer + 1]);
    ge2_value_t b = add_input(graph, bias_names[layer], 1, dims[layer + 1], 0);
    if (layer < 2) { /* unfused chain: the fusion pass folds it */
      CHECK(ge2_graph_add_gemm(graph, h, w, GE2_NO_VALUE, NULL, &h));
      CHECK(ge2_graph_add_bias(graph, h, b, &h));
      CHECK(ge2_graph_add_activation(graph, h, acts[layer], &h));
    } else {
      CHECK(ge2_graph_add_gemm_bias_act(graph, h, w, b, NULL, acts[layer], &h));
    }
  }
  CHECK(ge2_graph_mark_output(graph, h, "y", NULL));
  CHECK(ge2_plan_compile(context, graph, NULL, &plan));
  CHECK(ge2_plan_describe(plan, &text));
  printf("== plan\n%s\n", text);

  uint16_t* x = random_half((size_t)BATCH * D_IN, 1.0);
  uint16_t* weights[LAYERS];
  uint16_t* biases[LAYERS];
  for (layer = 0; layer < LAYERS; ++layer) {
    weights[layer] =
        random_half((size_t)(dims[layer] * dims[layer + 1]), 1.0 / sqrt((double)dims[layer]));
    biases[layer] = random_half((size_t)dims[layer + 1], 0.1);
  }
  uint16_t* y = malloc((size_t)BATCH * D_OUT * sizeof(uint16_t));
  memset(y, 0xff, (size_t)BATCH * D_OUT * sizeof(uint16_t)); /* NaN: unwritten outputs fail */
  ge2_binding_t bindings[2 * LAYERS + 2];
  size_t count = 0;
  bindings[count].name = "x";
  bindings[count++].data = x;
  for (layer = 0; layer < LAYERS; ++layer) {
    bindings[count].name = weight_names[layer];
    bindings[count++].data = weights[layer];
    bindings[count].name = bias_names[layer];
    bindings[count++].data = biases[layer];
  }
  bindings[count].name = "y";
  bindings[count++].data = y;
  /* Host pointers: on CUDA the library stages them through device memory. */
  CHECK(ge2_plan_execute(plan, bindings, count, NULL));

  double* activations = malloc((size_t)BATCH * D_HIDDEN * sizeof(double));
  double* next = malloc((size_t)BATCH * D_HIDDEN * sizeof(double));
  for (int64_t i = 0; i < (int64_t)BATCH * D_IN; ++i) activations[i] = from_half(x[i]);
  for (layer = 0; layer < LAYERS; ++layer) {
    reference_layer(activations, BATCH, dims[layer], dims[layer + 1], weights[layer], biases[layer],
                    acts[layer], next);
    double* swap = activations;
    activations = next;
    next = swap;
  }
  double diff = 0, norm = 0, max_abs = 0;
  for (int64_t i = 0; i < (int64_t)BATCH * D_OUT; ++i) {
    double got = from_half(y[i]), want = activations[i];
    double e = fabs(got - want);
    if (!(e == e)) e = INFINITY;
    diff += e * e;
    norm += want * want;
    if (e > max_abs) max_abs = e;
  }
  double relative = sqrt(diff) / sqrt(norm);
  const double bound = 1e-2;
  printf("== check against fp64 reference\n");
  printf(
      "backend: %s | output [%d, %d] f16 | max |error| = %.3e | relative Frobenius error = %.3e "
      "(bound %.0e): %s\n",
      kind == GE2_DEVICE_CUDA ? "CUDA" : "CPU", BATCH, D_OUT, max_abs, relative, bound,
      relative <= bound ? "PASS" : "FAIL");

  for (layer = 0; layer < LAYERS; ++layer) {
    free(weights[layer]);
    free(biases[layer]);
  }
  free(x);
  free(y);
  free(activations);
  free(next);
  ge2_plan_destroy(plan);
  ge2_graph_destroy(graph);
  ge2_context_destroy(context);
  return relative <= bound ? 0 : 1;
}
