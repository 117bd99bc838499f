#include "support/raw_enum_calls.h"

ge2_status_t raw_graph_add_activation(ge2_graph_t* graph, ge2_value_t x, int act,
                                      ge2_value_t* out) {
  return ge2_graph_add_activation(graph, x, (ge2_activation_t)act, out);
}

ge2_status_t raw_graph_add_gemm_bias_act(ge2_graph_t* graph, ge2_value_t a, ge2_value_t b,
                                         ge2_value_t bias, int act, ge2_value_t* out) {
  return ge2_graph_add_gemm_bias_act(graph, a, b, bias, NULL, (ge2_activation_t)act, out);
}

ge2_status_t raw_graph_add_elementwise(ge2_graph_t* graph, int op, ge2_value_t a, ge2_value_t b,
                                       ge2_value_t* out) {
  return ge2_graph_add_elementwise(graph, (ge2_elementwise_op_t)op, a, b, out);
}

const char* raw_status_string(int status) { return ge2_status_string((ge2_status_t)status); }

void raw_set_device(ge2_context_options_t* options, int device) {
  options->device = (ge2_device_kind_t)device;
}

void raw_set_tune_mode(ge2_context_options_t* options, int tune_mode) {
  options->tune_mode = (ge2_tune_mode_t)tune_mode;
}

void raw_set_dtype(ge2_tensor_desc_t* desc, int dtype) { desc->dtype = (ge2_dtype_t)dtype; }

void raw_set_params_enums(ge2_gemm_params_t* params, int dtype, int activation) {
  params->dtype = (ge2_dtype_t)dtype;
  params->activation = (ge2_activation_t)activation;
}
