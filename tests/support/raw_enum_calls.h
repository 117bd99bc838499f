/*
** C shims that pass any int as one of ge2's enum parameters, as a C or FFI
** caller can. In C an enum argument is just its integer; in C++ even copying
** an out-of-range enum value is undefined (UBSan's "load of value ... not a
** valid value"), so tests and the fuzzer make these calls through C.
*/
#ifndef GE2_TEST_RAW_ENUM_CALLS_H
#define GE2_TEST_RAW_ENUM_CALLS_H

#include "ge_v2_api.h"

#ifdef __cplusplus
extern "C" {
#endif

ge2_status_t raw_graph_add_activation(ge2_graph_t* graph, ge2_value_t x, int act, ge2_value_t* out);
ge2_status_t raw_graph_add_gemm_bias_act(ge2_graph_t* graph, ge2_value_t a, ge2_value_t b,
                                         ge2_value_t bias, int act, ge2_value_t* out);
ge2_status_t raw_graph_add_elementwise(ge2_graph_t* graph, int op, ge2_value_t a, ge2_value_t b,
                                       ge2_value_t* out);
const char* raw_status_string(int status);
/* Sets options->device, ->tune_mode, a tensor's dtype or a parameter block's
   dtype / activation to any int. */
void raw_set_device(ge2_context_options_t* options, int device);
void raw_set_tune_mode(ge2_context_options_t* options, int tune_mode);
void raw_set_dtype(ge2_tensor_desc_t* desc, int dtype);
void raw_set_params_enums(ge2_gemm_params_t* params, int dtype, int activation);

#ifdef __cplusplus
}
#endif
#endif
