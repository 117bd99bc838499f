/*
** ge_v2_api.h — the public C interface of ge2, a GPU graph executor for
** GEMM-heavy graphs (MLPs, transformer feed-forward blocks).
**
** This one header is the whole contract. Every function, type and result code
** is documented where it is declared. The header is plain C (C89 with
** <stddef.h>/<stdint.h>) so that C, C++ and FFI layers such as Python's ctypes
** can use it; no C++ type, exception or CUDA type crosses it.
**
** Conventions, which hold for every function unless its comment says otherwise:
**
**   - Every function that can fail returns a ge2_status_t. GE2_OK (0) means
**     success; any other value means that nothing observable happened except
**     that ge2_last_error() now describes the failure. Output parameters are
**     written only on success.
**   - ge2_last_error() returns a message for the last failed call on the
**     calling thread, naming the function, the offending argument and its
**     value, and for CUDA / cuBLASLt failures the library's own status string.
**   - Handles (ge2_context_t, ge2_graph_t, ge2_plan_t) are opaque and owned by
**     the caller from creation until the matching destroy function. Destroy
**     functions accept NULL.
**   - Strings returned by the library are owned by the object they came from
**     and stay valid until that object is destroyed (or, for ge2_last_error,
**     until the next failing ge2 call on the same thread).
**   - Option structs carry their own size in their first member so that the
**     library can grow them without breaking callers compiled against an older
**     header. Always fill them with the matching *_init function first: it is
**     a macro that passes the struct's size as the caller's header declares it
**     to the *_init_sized function, so the library never writes past the end
**     of an older caller's struct. A struct larger than the library's (the
**     caller's header is newer than the library) is refused: run a caller with
**     a library at least as new as the header it was built against.
**
** Enumerations end in a *_MAX_ENUM member that is not a valid value: it
** keeps every enum 32 bits wide in C and C++ alike, so that an out-of-range
** value passed from C is rejected with GE2_ERROR_INVALID_ARGUMENT rather than
** being undefined behaviour in the library.
**
** Thread safety: contexts, graphs and plans may be used from several threads.
** A context and a plan lock internally; a graph must not be modified by two
** threads at once, nor modified while another thread compiles it or reads a
** description from it (the library detects this and returns
** GE2_ERROR_INVALID_ARGUMENT rather than corrupting it; several threads may
** compile one graph at once). Executions of one
** plan are ordered (they share the plan's intermediate buffers); executions
** of different plans on different CUDA streams run concurrently.
*/
#ifndef GE_V2_API_H
#define GE_V2_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define GE2_API __declspec(dllimport)
#elif defined(GE2_BUILDING_LIBRARY)
#define GE2_API __attribute__((visibility("default")))
#else
#define GE2_API
#endif

/*
** GE2_API_VERSION is the major version of this interface. It changes only when
** an existing function, type or constant changes meaning or layout; additions
** (new functions, new enum values, new trailing struct members) keep it.
** Pass it to ge2_context_create(); a library built for another major version
** refuses with GE2_ERROR_VERSION_MISMATCH.
*/
#define GE2_API_VERSION 2

/* ------------------------------------------------------------------------- */
/* Result codes                                                              */
/* ------------------------------------------------------------------------- */

/*
** ge2_status_t: the result of every fallible call. The numeric values are
** part of the ABI and never change.
*/
typedef enum ge2_status {
  GE2_OK = 0,                      /* success */
  GE2_ERROR_INVALID_ARGUMENT = 1,  /* NULL pointer, bad size, unknown enum, bad name, bad stride */
  GE2_ERROR_SHAPE_MISMATCH = 2,    /* operand shapes or dtypes that do not fit together */
  GE2_ERROR_UNSUPPORTED = 3,       /* valid request this build or device cannot run */
  GE2_ERROR_NO_DEVICE = 4,         /* a CUDA device was required and none is usable */
  GE2_ERROR_CUDA = 5,              /* a CUDA runtime call failed; message has cudaGetErrorString */
  GE2_ERROR_CUBLAS = 6,            /* a cuBLASLt call failed; message has the cuBLAS status name */
  GE2_ERROR_OUT_OF_MEMORY = 7,     /* host or device allocation failed */
  GE2_ERROR_TUNEDB = 8,            /* the tuning database could not be opened, read or written */
  GE2_ERROR_VERSION_MISMATCH = 9,  /* caller and library disagree on GE2_API_VERSION */
  GE2_ERROR_INTERNAL = 10,         /* a bug in ge2; please report the message */
  GE2_STATUS_MAX_ENUM = 0x7fffffff /* not a value: keeps the enum 32 bits wide */
} ge2_status_t;

/*
** ge2_status_string: a short constant English name for a status, e.g.
** "GE2_ERROR_SHAPE_MISMATCH". Unknown values give "GE2_UNKNOWN_STATUS".
** Never returns NULL.
*/
GE2_API const char* ge2_status_string(ge2_status_t status);

/*
** ge2_last_error: the message of the last failed ge2 call on this thread, or
** "" if none failed yet. The message names the function and the argument,
** e.g. "ge2_graph_add_gemm: argument 'b': K=64 does not match A's K=32".
** Never returns NULL. Successful calls do not clear it.
*/
GE2_API const char* ge2_last_error(void);

/*
** ge2_get_api_version: the GE2_API_VERSION the library was built with. A caller
** (or an FFI binding) compares it with the version it was written for.
*/
GE2_API int ge2_get_api_version(void);

/*
** ge2_get_version_string: the library's release version, e.g. "2.1.0".
*/
GE2_API const char* ge2_get_version_string(void);

/* ------------------------------------------------------------------------- */
/* Enumerations                                                              */
/* ------------------------------------------------------------------------- */

/* Element types. Arithmetic always accumulates in fp32. */
typedef enum ge2_dtype {
  GE2_DTYPE_F16 = 1,              /* IEEE binary16 */
  GE2_DTYPE_BF16 = 2,             /* bfloat16 */
  GE2_DTYPE_F32 = 3,              /* IEEE binary32 */
  GE2_DTYPE_F8_E4M3 = 4,          /* FP8 e4m3 (OCP "fn": largest finite 448, no infinities): a
                                     storage type only, the data of a quantized constant
                                     (ge2_graph_add_quantized_constant); no value of a graph,
                                     input, output or one-shot GEMM has it (added in 2.7) */
  GE2_DTYPE_MAX_ENUM = 0x7fffffff /* not a value: keeps the enum 32 bits wide */
} ge2_dtype_t;

/* Activations. The numeric values are part of the ABI. */
typedef enum ge2_activation {
  GE2_ACT_NONE = 0,
  GE2_ACT_RELU = 1,             /* max(x, 0) */
  GE2_ACT_GELU_ERF = 2,         /* x * 0.5 * (1 + erf(x / sqrt(2))) */
  GE2_ACT_GELU_TANH = 3,        /* x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) */
  GE2_ACT_SILU = 4,             /* x * sigmoid(x) = x / (1 + exp(-x)) (added in 2.2) */
  GE2_ACT_QUICK_GELU = 5,       /* x * sigmoid(1.702 x): CLIP's QuickGELU (added in 2.6) */
  GE2_ACT_MAX_ENUM = 0x7fffffff /* not a value: keeps the enum 32 bits wide */
} ge2_activation_t;

/* Binary elementwise operations (added in 2.2). */
typedef enum ge2_elementwise_op {
  GE2_ELEMENTWISE_ADD = 1,              /* a + b */
  GE2_ELEMENTWISE_MUL = 2,              /* a * b */
  GE2_ELEMENTWISE_MAX_ENUM = 0x7fffffff /* not a value: keeps the enum 32 bits wide */
} ge2_elementwise_op_t;

/* Which backend a context runs on. */
typedef enum ge2_device_kind {
  GE2_DEVICE_AUTO = 0,             /* CUDA when a usable device exists, else the CPU backend */
  GE2_DEVICE_CUDA = 1,             /* CUDA only; GE2_ERROR_NO_DEVICE if there is none */
  GE2_DEVICE_CPU = 2,              /* the CPU reference backend */
  GE2_DEVICE_MAX_ENUM = 0x7fffffff /* not a value: keeps the enum 32 bits wide */
} ge2_device_kind_t;

/* How a context uses autotuning (CUDA only; ignored on the CPU backend). */
typedef enum ge2_tune_mode {
  GE2_TUNE_OFF = 0,    /* cuBLASLt heuristic's first choice; the tuning database is not read */
  GE2_TUNE_CACHED = 1, /* use tuned results from the database; never tune while compiling */
  GE2_TUNE_TUNE = 2,   /* like CACHED, and tune a missing problem once, at plan compile time */
  GE2_TUNE_MAX_ENUM = 0x7fffffff /* not a value: keeps the enum 32 bits wide */
} ge2_tune_mode_t;

/* ------------------------------------------------------------------------- */
/* Opaque handles                                                            */
/* ------------------------------------------------------------------------- */

typedef struct ge2_context_s ge2_context_t; /* device, cuBLASLt handle, tuning cache */
typedef struct ge2_graph_s ge2_graph_t;     /* a graph under construction */
typedef struct ge2_plan_s ge2_plan_t;       /* a compiled, executable graph */

/* ------------------------------------------------------------------------- */
/* Context                                                                   */
/* ------------------------------------------------------------------------- */

/*
** Diagnostics. A context reports what it degrades or works around (a tuning
** database it cannot use, a stale tuned row, GE2_DEVICE_AUTO running on the
** CPU) through a callback or, without one, on stderr as "ge2: warning: ...".
** Errors of a call are not logged: they are its status and ge2_last_error().
** (Added in 2.3.)
*/
typedef enum ge2_log_level {
  GE2_LOG_DEFAULT = 0, /* in options: $GE2_LOG_LEVEL ("off", "error", "warning", "info"),
                          else warning */
  GE2_LOG_OFF = 1,
  GE2_LOG_ERROR = 2,
  GE2_LOG_WARNING = 3,
  GE2_LOG_INFO = 4,
  GE2_LOG_LEVEL_MAX_ENUM = 0x7fffffff
} ge2_log_level_t;

/*
** ge2_log_callback_t: receives one message (no trailing newline) of the given
** level. message is valid only during the call. It may be called from any
** thread that uses the context, from several at once; it must return, must
** not throw (C++) and must not call ge2 functions on the same context.
*/
typedef void (*ge2_log_callback_t)(void* user_data, ge2_log_level_t level, const char* message);

typedef struct ge2_context_options {
  uint32_t struct_size;            /* set by ge2_context_options_init */
  ge2_device_kind_t device;        /* default GE2_DEVICE_AUTO */
  int device_ordinal;              /* CUDA device index, default 0; ge2 works on it without
                                      changing the calling thread's current device */
  ge2_tune_mode_t tune_mode;       /* default GE2_TUNE_CACHED */
  const char* tunedb_path;         /* NULL: $GE2_TUNEDB, else $XDG_CACHE_HOME/ge2/tunedb.sqlite,
                                      else ~/.cache/ge2/tunedb.sqlite;
                                      "" : no database, in-memory tuning cache only */
  uint32_t one_shot_cache_size;    /* how many compiled plans ge2_gemm_bias_act keeps, the
                                      least recently used evicted first; 0 compiles every
                                      call. Default 1024. Cycling through more distinct
                                      parameter blocks than this misses every time: size
                                      it to the working set. (Added in 2.2; older callers'
                                      smaller struct_size reads as the default.) */
  ge2_log_callback_t log_callback; /* NULL (default): messages go to stderr. (Added in 2.3, as
                                      the two members below; older callers' smaller
                                      struct_size reads as the defaults.) */
  void* log_user_data;             /* passed to log_callback; default NULL */
  ge2_log_level_t log_level;       /* messages up to this level are delivered;
                                      default GE2_LOG_DEFAULT */
} ge2_context_options_t;

/* ge2_context_options_init_sized: fill the caller's struct of struct_size bytes with defaults:
** every field gets its default and struct_size is stored. struct_size below
** the 2.0 struct's size, or above this library's (a newer header), is
** GE2_ERROR_INVALID_ARGUMENT.
** Call it through the ge2_context_options_init macro below. (Added in 2.3.) */
GE2_API ge2_status_t ge2_context_options_init_sized(ge2_context_options_t* options,
                                                    size_t struct_size);
/*
** ge2_context_options_init: fill *options with defaults. options must not be NULL.
** The exported function of this name (the entry point of callers built
** against 2.2 headers) fills a 2.2-sized struct; the macro passes the
** caller's own size.
*/
GE2_API ge2_status_t(ge2_context_options_init)(ge2_context_options_t* options);
#define ge2_context_options_init(options) \
  ge2_context_options_init_sized((options), sizeof *(options))

/*
** ge2_context_create: create a context.
**   api_version  pass GE2_API_VERSION; another major version gives
**                GE2_ERROR_VERSION_MISMATCH.
**   options      NULL for defaults, or a struct filled by ge2_context_options_init.
**   out          receives the new context.
** Errors: GE2_ERROR_NO_DEVICE when GE2_DEVICE_CUDA was asked for and no device
** is usable (or the library was built without CUDA); GE2_ERROR_CUDA /
** GE2_ERROR_CUBLAS when initialisation fails; GE2_ERROR_TUNEDB in
** GE2_TUNE_TUNE mode when the tuning database cannot be created or opened.
** In GE2_TUNE_CACHED mode the database is a cache: a missing, unreadable,
** corrupt, foreign or other-version file is not an error; ge2 warns once on
** stderr, counts it in ge2_context_describe ("tuning.tunedb_errors") and uses
** cuBLASLt's heuristic. A file ge2 does not recognise as its own tuning
** database is never written, in any mode. A CPU-backend context reads
** $GE2_CPU_THREADS (the most threads one GEMM uses, 1 to 1024); another value
** is GE2_ERROR_INVALID_ARGUMENT.
*/
GE2_API ge2_status_t ge2_context_create(int api_version, const ge2_context_options_t* options,
                                        ge2_context_t** out);

/*
** ge2_context_destroy: release the context. Plans compiled from it stay valid:
** each holds what it needs of the context (device, cuBLASLt handle) until the
** plan itself is destroyed, so plans and context may be destroyed in any order.
*/
GE2_API void ge2_context_destroy(ge2_context_t* context);

/* ge2_context_get_device_kind: the backend actually chosen (GE2_DEVICE_CUDA or GE2_DEVICE_CPU). */
GE2_API ge2_status_t ge2_context_get_device_kind(const ge2_context_t* context,
                                                 ge2_device_kind_t* out);

/*
** ge2_context_describe: a JSON object describing the context (backend, device
** name, compute capability, SM count, cuBLASLt version, tuning database path,
** mode and errors, the one-shot plan cache's size and hit counts). The string
** is owned by the context and stays valid until the context is destroyed;
** a later call returns a new string when the description changed.
*/
GE2_API ge2_status_t ge2_context_describe(ge2_context_t* context, const char** json_out);

/* ------------------------------------------------------------------------- */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------- */

/*
** A tensor description. rank is 1 (bias vectors), 2 (matrices) or 3 (a batch
** of matrices, batch first). strides are in elements, one per dimension; all
** zero means dense row-major. A matrix is usable by every kernel when one of
** its two inner strides is 1 (row-major or column-major with any leading
** dimension); other layouts run on the fallback kernels. Strides must not make
** distinct elements overlap.
**
** Size limits, checked everywhere sizes enter (descriptions, GEMM results,
** one-shot parameters) so that no size computation can overflow: every
** dimension is at most 2^31, every tensor (a GEMM's result included: batch *
** M * N) has at most 2^40 elements and its strides span at most 2^40 elements.
** Larger requests fail with GE2_ERROR_INVALID_ARGUMENT.
*/
typedef struct ge2_tensor_desc {
  ge2_dtype_t dtype;
  int32_t rank;
  int64_t shape[3];
  int64_t strides[3];
} ge2_tensor_desc_t;

/* A handle to a value (tensor) inside a graph; negative means "none". */
typedef int32_t ge2_value_t;
#define GE2_NO_VALUE ((ge2_value_t)-1)

/* ------------------------------------------------------------------------- */
/* Graph builder                                                             */
/* ------------------------------------------------------------------------- */

/* ge2_graph_create: an empty graph. */
GE2_API ge2_status_t ge2_graph_create(ge2_graph_t** out);

/* ge2_graph_destroy: release a graph. Plans compiled from it stay valid. */
GE2_API void ge2_graph_destroy(ge2_graph_t* graph);

/*
** ge2_graph_add_input: declare a named input. name must be a non-empty unique
** string of at most 255 bytes. At execution it is bound by name.
*/
GE2_API ge2_status_t ge2_graph_add_input(ge2_graph_t* graph, const char* name,
                                         const ge2_tensor_desc_t* desc, ge2_value_t* out);

/*
** ge2_graph_add_dynamic_input: declare a named input whose leading dimension
** (dimension 0: the rows of a matrix, the batch of a rank-3 tensor) is the
** graph's dynamic extent, the token or batch count given at each execution
** (ge2_plan_execute_dynamic). desc->shape[0] is the extent's upper bound; the
** other dimensions are fixed. All dynamic inputs, and every value computed
** from one, share the one extent, and a plan sizes its intermediates for the
** bound once. desc must have rank 2 or 3 with dimension 0 outermost
** (strides[0] at least the span of the other dimensions, as dense row-major
** has), so that a smaller extent addresses a prefix of the bound's bytes; an
** output layout of a dynamic value follows the same rule. The extent may reach
** a GEMM only as the rows of op(a) or as a batch, never as K or N, and an
** elementwise operand of the other's rank must be dynamic exactly when the
** other is; the node that breaks this is refused with GE2_ERROR_SHAPE_MISMATCH.
** Otherwise as ge2_graph_add_input. (Added in 2.4.)
*/
GE2_API ge2_status_t ge2_graph_add_dynamic_input(ge2_graph_t* graph, const char* name,
                                                 const ge2_tensor_desc_t* desc, ge2_value_t* out);

/*
** ge2_graph_add_constant: declare a named tensor whose contents are given now,
** typically a weight. data is host memory holding the tensor as desc
** describes it (desc's strides, all zero meaning dense row-major); ge2 copies
** the desc's byte span at this call, so the caller's buffer may change or be
** freed afterwards. A compiled plan holds its own copy in the backend's memory
** (device memory on CUDA, copied at compile time), so executions bind only the
** inputs and outputs; ge2_plan_describe reports each constant and the bytes
** they take. name follows ge2_graph_add_input's rules and shares its name
** space. A constant cannot be an output. (Added in 2.2.)
*/
GE2_API ge2_status_t ge2_graph_add_constant(ge2_graph_t* graph, const char* name,
                                            const ge2_tensor_desc_t* desc, const void* data,
                                            ge2_value_t* out);

/*
** ge2_graph_add_quantized_constant: declare a constant given in a quantized
** storage type with its scales, typically a weight of a checkpoint stored in
** FP8. Its value in the graph is the dequantized tensor
**     value[i, j] = dtype(e4m3(data[i, j]) * scale)
** of desc->dtype (f16, bf16 or f32), rounded to nearest even, where scale is
** scales[0] (scale_axis -1: one scale for the tensor) or scales[i]
** (scale_axis 0) or scales[j] (scale_axis 1), so that every op reads it as any
** other constant and the CPU backend computes with it as written.
**   desc          the value: rank 2, dense (strides all zero or row-major),
**                 dtype GE2_DTYPE_F16, GE2_DTYPE_BF16 or GE2_DTYPE_F32.
**   storage_dtype GE2_DTYPE_F8_E4M3 (the only quantized type so far).
**   data          shape[0] * shape[1] bytes, row-major; no NaN code (0x7f,
**                 0xff).
**   scales        scale_count finite floats: 1 for scale_axis -1, else
**                 shape[scale_axis].
** Every dequantized element must be finite in desc->dtype (448 * scale may
** overflow f16). Each fault is GE2_ERROR_INVALID_ARGUMENT naming the argument
** and value. ge2 copies data and scales at this call.
**
** What the quantized form buys: where the constant is a GEMM's B operand and its
** scales are per tensor or per output channel (the N axis of op(B): axis 0 of
** nn.Linear's [N, K] weight with trans_b, axis 1 of a [K, N] weight), the CUDA
** backend's weight-only FP8 kernel (cuda_skinny_fp8w; compute capability 8.9 and
** later, up to 16 rows) reads these e4m3 bytes and scales as given, one byte per
** weight, without allow_fp8 and without the accuracy gate: it computes
** sum_k A[i, k] * e4m3(data) exactly in fp32 and multiplies by the scale,
** which differs from the 16-bit value above only by that value's rounding.
** Other kernels read the 16-bit value, which the plan keeps beside the e4m3
** copy unless no step reads it (a fixed plan without allow_fp8 whose every
** reader runs cuda_skinny_fp8w releases it; the plan's description says
** which). Under allow_fp8 the row-wise FP8 kernels take these bytes too
** instead of quantizing the 16-bit value.
** (Added in 2.7.)
*/
GE2_API ge2_status_t ge2_graph_add_quantized_constant(ge2_graph_t* graph, const char* name,
                                                      const ge2_tensor_desc_t* desc,
                                                      ge2_dtype_t storage_dtype, const void* data,
                                                      const float* scales, int64_t scale_count,
                                                      int32_t scale_axis, ge2_value_t* out);

/*
** ge2_graph_add_block_quantized_constant: ge2_graph_add_quantized_constant with
** a scale per block of block_rows x block_cols elements, as block-scaled FP8
** checkpoints store weights (DeepSeek-V3 and Qwen3's FP8 releases: 128 x 128,
** the scales stored as "weight_scale_inv" and multiplied). The value is
**     value[i, j] = dtype(e4m3(data[i, j]) * scales[(i / block_rows) * grid_cols
**                                                     + j / block_cols])
** with grid_cols = ceil(shape[1] / block_cols); scale_count must be
** ceil(shape[0] / block_rows) * grid_cols (the last blocks of a row or column may
** be partial). block_rows and block_cols are at least 1; a block larger than the
** matrix covers all of it (block_rows = shape[0] is one scale per column block).
** Every other argument and fault is as for ge2_graph_add_quantized_constant.
**
** Where the constant is a GEMM's B and its scales vary along K, the weight-only
** FP8 kernel (cuda_skinny_fp8w, 1-16 rows) reads the e4m3 bytes and applies each
** block's scale to the sum of its products, when the blocks span 64 times a power
** of two along K and a multiple of 8 along N (128 x 128 does); the row-wise FP8
** kernels under allow_fp8 read one scale per output channel and are not offered
** such a weight (the plan says why), so other kernels read the 16-bit value.
** Scales that do not vary along K are taken as per output channel, as by the
** function above.
** (Added in 2.8.)
*/
GE2_API ge2_status_t ge2_graph_add_block_quantized_constant(ge2_graph_t* graph, const char* name,
                                                            const ge2_tensor_desc_t* desc,
                                                            ge2_dtype_t storage_dtype,
                                                            const void* data, const float* scales,
                                                            int64_t scale_count, int64_t block_rows,
                                                            int64_t block_cols, ge2_value_t* out);

/* Attributes of a GEMM: D = alpha * op(A) * op(B) + beta * C. */
typedef struct ge2_gemm_attrs {
  uint32_t struct_size; /* set by ge2_gemm_attrs_init */
  int trans_a;          /* 0: A is [M,K]; 1: A is [K,M] and is used transposed */
  int trans_b;          /* 0: B is [K,N]; 1: B is [N,K] and is used transposed */
  float alpha;          /* default 1 */
  float beta;           /* default 0; non-zero needs a C operand */
} ge2_gemm_attrs_t;

/* ge2_gemm_attrs_init_sized: fill the caller's struct of struct_size bytes with defaults:
** every field gets its default and struct_size is stored. struct_size below
** the 2.0 struct's size, or above this library's (a newer header), is
** GE2_ERROR_INVALID_ARGUMENT.
** Call it through the ge2_gemm_attrs_init macro below. (Added in 2.3.) */
GE2_API ge2_status_t ge2_gemm_attrs_init_sized(ge2_gemm_attrs_t* attrs, size_t struct_size);
/*
** ge2_gemm_attrs_init: fill *attrs with defaults (no transposes, alpha 1,
** beta 0).
** The exported function of this name (the entry point of callers built
** against 2.2 headers) fills a 2.2-sized struct; the macro passes the
** caller's own size.
*/
GE2_API ge2_status_t(ge2_gemm_attrs_init)(ge2_gemm_attrs_t* attrs);
#define ge2_gemm_attrs_init(attrs) ge2_gemm_attrs_init_sized((attrs), sizeof *(attrs))

/*
** ge2_graph_add_gemm: out = alpha * op(a) * op(b) + beta * c.
** a and b are rank 2 or 3 with the same dtype; rank-3 operands carry a batch
** dimension, and a rank-2 operand is broadcast over the other's batch.
** c is GE2_NO_VALUE, or a tensor of the output's shape (needs beta != 0 to matter).
** attrs may be NULL for defaults. The result has a's dtype and shape [batch,] M, N.
*/
GE2_API ge2_status_t ge2_graph_add_gemm(ge2_graph_t* graph, ge2_value_t a, ge2_value_t b,
                                        ge2_value_t c, const ge2_gemm_attrs_t* attrs,
                                        ge2_value_t* out);

/* ge2_graph_add_bias: out = x + bias, bias of shape [N] broadcast over rows and batch. */
GE2_API ge2_status_t ge2_graph_add_bias(ge2_graph_t* graph, ge2_value_t x, ge2_value_t bias,
                                        ge2_value_t* out);

/* ge2_graph_add_activation: out = act(x), elementwise. */
GE2_API ge2_status_t ge2_graph_add_activation(ge2_graph_t* graph, ge2_value_t x,
                                              ge2_activation_t act, ge2_value_t* out);

/*
** ge2_graph_add_elementwise: out = a (op) b, elementwise, in fp32 arithmetic.
** a has rank 2 or 3; b has a's dtype and either a's shape or a trailing part
** of it, which is broadcast over the leading dimensions: [N] over [M, N] or
** [B, M, N], [M, N] over [B, M, N]. The result has a's shape. A residual add
** after a GEMM (y = x + gemm(...)) is fused into the GEMM as its C operand
** (beta = 1) when the compile option fuse is on. (Added in 2.2.)
*/
GE2_API ge2_status_t ge2_graph_add_elementwise(ge2_graph_t* graph, ge2_elementwise_op_t op,
                                               ge2_value_t a, ge2_value_t b, ge2_value_t* out);

/*
** ge2_graph_add_gemm_bias_act: out = act(alpha * op(a) * op(b) + bias), the
** fused node the fusion pass also produces. bias may be GE2_NO_VALUE.
*/
GE2_API ge2_status_t ge2_graph_add_gemm_bias_act(ge2_graph_t* graph, ge2_value_t a, ge2_value_t b,
                                                 ge2_value_t bias, const ge2_gemm_attrs_t* attrs,
                                                 ge2_activation_t act, ge2_value_t* out);

/*
** ge2_graph_mark_output: make value an output bound under name. layout may be
** NULL (dense row-major) or a description whose dtype and shape equal the
** value's and whose strides give the output's memory layout.
*/
GE2_API ge2_status_t ge2_graph_mark_output(ge2_graph_t* graph, ge2_value_t value, const char* name,
                                           const ge2_tensor_desc_t* layout);

/* ge2_graph_get_desc: the (inferred) description of a value. */
GE2_API ge2_status_t ge2_graph_get_desc(const ge2_graph_t* graph, ge2_value_t value,
                                        ge2_tensor_desc_t* out);

/* ------------------------------------------------------------------------- */
/* Compilation and execution                                                 */
/* ------------------------------------------------------------------------- */

typedef struct ge2_compile_options {
  uint32_t struct_size;     /* set by ge2_compile_options_init */
  int fuse;                 /* run the GEMM+bias+activation fusion pass; default 1 */
  int allow_tf32;           /* f32 GEMMs may use TF32 tensor cores (lt_tf32); default 0 */
  int allow_staging;        /* unaligned f16/bf16 operands may be copied into aligned
                               buffers when the cost model says it pays; default 1 */
  const char* force_kernel; /* NULL, or a kernel name ("lt_f16", "cuda_f32", "cpu_ref", ...)
                               to use for every GEMM; $GE2_FORCE_KERNEL is read when NULL */
  int graph_replay;         /* CUDA: record an execution's work as a CUDA graph and replay it
                               while the bound pointers repeat (the 64 most recent sets,
                               each per extent of a dynamic plan, are kept; new
                               pointers record again). One cudaGraphLaunch then
                               replaces one cuBLASLt call per step on the host. Costs a
                               32 MiB workspace per plan. Executions stay stream-ordered as
                               without it; the data are read when the replay runs. Ignored
                               on the CPU backend and inside a caller's own stream capture.
                               Default 0. (Added in 2.1; older callers' smaller struct_size
                               reads as 0.) */
  int allow_fp8;            /* CUDA (compute capability 9.0 and later) and the CPU backend's
                               emulation: an f16/bf16 GEMM whose cost model favours it runs
                               on FP8 e4m3 copies of its operands (lt_fp8_e4m3 / cpu_fp8_ref):
                               row-wise scales (one per output channel of the weight,
                               quantized once at compile when constant; one per row of the
                               activation, every execution). Each such GEMM runs
                               at compile beside its 16-bit kernel on 256 rows of N(0, 1)
                               inputs and keeps FP8 only if no output channel differs by
                               more than fp8_max_error; the plan text ("fp8") gives every
                               layer's measured errors and the decision (docs/fp8.md).
                               At decode sizes (up to 16 rows) on a constant weight the
                               kernel may be cuda_skinny_fp8w instead: the weight's e4m3
                               copy, the activation left in 16 bits (since 2.6).
                               Default 0. (Added in 2.5.) */
  float fp8_max_error;      /* the accuracy gate's budget: the largest relative distance
                               ||D_fp8[:, j] - D_16bit[:, j]|| / ||D_16bit[:, j]|| an output
                               channel j may show, before the activation, for the layer to
                               keep FP8 (FFN weights measured 0.047 on the H200); a
                               finite value in (0, 1], read only when allow_fp8 is set.
                               Default 0.1. (Added in 2.5.) */
} ge2_compile_options_t;

/* ge2_compile_options_init_sized: fill the caller's struct of struct_size bytes with defaults:
** every field gets its default and struct_size is stored. struct_size below
** the 2.0 struct's size, or above this library's (a newer header), is
** GE2_ERROR_INVALID_ARGUMENT.
** Call it through the ge2_compile_options_init macro below. (Added in 2.3.) */
GE2_API ge2_status_t ge2_compile_options_init_sized(ge2_compile_options_t* options,
                                                    size_t struct_size);
/*
** ge2_compile_options_init: fill *options with defaults.
** The exported function of this name (the entry point of callers built
** against 2.2 headers) fills a 2.2-sized struct; the macro passes the
** caller's own size.
*/
GE2_API ge2_status_t(ge2_compile_options_init)(ge2_compile_options_t* options);
#define ge2_compile_options_init(options) \
  ge2_compile_options_init_sized((options), sizeof *(options))

/*
** ge2_plan_compile: validate the graph, infer shapes, fuse, remove dead nodes,
** choose a kernel for every node and allocate intermediate buffers. The plan
** is independent of the graph afterwards. options may be NULL. On CUDA the
** plan's device data (constants, weights prepared for its kernels) are in
** place when it returns: its first execution may go on any stream at once,
** non-blocking ones included, without a synchronisation by the caller.
** Errors: GE2_ERROR_INVALID_ARGUMENT (no outputs, bad option),
** GE2_ERROR_UNSUPPORTED (a forced kernel cannot run a node), device errors.
*/
GE2_API ge2_status_t ge2_plan_compile(ge2_context_t* context, const ge2_graph_t* graph,
                                      const ge2_compile_options_t* options, ge2_plan_t** out);

/* ge2_plan_destroy: release a plan and its buffers (after its work on any stream finished). */
GE2_API void ge2_plan_destroy(ge2_plan_t* plan);

/*
** ge2_plan_describe: a JSON text of the plan: the passes run, every step with
** its fused nodes, the chosen kernel, the candidates with their scores and the
** reason for the choice. Owned by the plan.
*/
GE2_API ge2_status_t ge2_plan_describe(const ge2_plan_t* plan, const char** json_out);

/* Information about one input or output of a plan. */
typedef struct ge2_io_info {
  const char* name;       /* owned by the plan */
  int is_output;          /* 0 input, 1 output */
  ge2_tensor_desc_t desc; /* strides filled in (never all zero) */
  size_t required_bytes;  /* bytes the bound buffer must span */
} ge2_io_info_t;

/* ge2_plan_io_count / ge2_plan_io_info: enumerate inputs then outputs. */
GE2_API ge2_status_t ge2_plan_io_count(const ge2_plan_t* plan, size_t* out);
GE2_API ge2_status_t ge2_plan_io_info(const ge2_plan_t* plan, size_t index, ge2_io_info_t* out);

/*
** ge2_plan_get_max_extent: the upper bound of the plan's dynamic extent (see
** ge2_graph_add_dynamic_input), or 0 when the graph had no dynamic input.
** (Added in 2.4.)
*/
GE2_API ge2_status_t ge2_plan_get_max_extent(const ge2_plan_t* plan, int64_t* out);

/*
** ge2_plan_io_is_dynamic: *out = 1 when input or output `index` (as for
** ge2_plan_io_info) has the dynamic extent as its leading dimension, else 0.
** ge2_plan_io_info describes such an io at the bound. (A function of its own
** because ge2_io_info_t has no struct_size to grow by. Added in 2.4.)
*/
GE2_API ge2_status_t ge2_plan_io_is_dynamic(const ge2_plan_t* plan, size_t index, int* out);

/* A name bound to memory for one execution. */
typedef struct ge2_binding {
  const char* name;
  void* data;
} ge2_binding_t;

/*
** ge2_plan_execute: run the plan. Every input and output must be bound exactly
** once, so num_bindings is at most ge2_plan_io_count (a larger count is
** refused before the array is read). Each binding must span the io's
** required_bytes. An output's bytes [data, data + required_bytes) must not
** overlap the bytes of any other binding (inputs may overlap each other);
** overlapping bindings are refused with GE2_ERROR_INVALID_ARGUMENT.
** On the CPU backend data are host pointers and stream must be NULL. On
** CUDA, data are device pointers (from cudaMalloc, CuPy, PyTorch, ...) and the
** work is queued on stream (a cudaStream_t; NULL is the legacy default
** stream); the call returns without waiting. Host pointers are accepted too and
** staged through device memory, synchronously (slow; meant for tests/tools).
** A call on a stream being captured into a CUDA graph (cudaStreamBeginCapture,
** torch.cuda.graph) records its work into that graph. It then uses a workspace
** of that capture sequence alone (32 MiB per capture and stream), so graphs may
** replay on any streams, concurrently with each other and with eager calls;
** the graph owns it and it is freed once the graph and its executable graphs
** are destroyed. Ordering replays against other executions of the same plan
** (which share its intermediates) is the caller's, and the plan must outlive
** the graph. A capture already invalidated is GE2_ERROR_CUDA.
*/
GE2_API ge2_status_t ge2_plan_execute(ge2_plan_t* plan, const ge2_binding_t* bindings,
                                      size_t num_bindings, void* stream);

/*
** ge2_plan_execute_dynamic: run a plan with a dynamic extent (see
** ge2_graph_add_dynamic_input) at `extent` rows or batches, 1 <= extent <=
** ge2_plan_get_max_extent; other values, and a plan without a dynamic extent,
** are GE2_ERROR_INVALID_ARGUMENT. A dynamic io's binding must span the bytes
** of its description with shape[0] = extent: (extent - 1) * strides[0] plus
** the span of one row (or matrix); the fixed ios span their required_bytes.
** Otherwise as ge2_plan_execute, which runs such a plan at the bound.
**
** Kernels are chosen at compile time once per bucket of extents (the tuning
** database's rule: 1, 2, 3-4, 5-8, ... 129-256, then multiples of 256, each
** chosen at its largest extent, tuned there in GE2_TUNE_TUNE mode); the plan
** text lists the buckets and their choices. The first execution at an extent
** builds that extent's steps with its bucket's kernels (no device memory is
** allocated unless a step stages unaligned operands); the plan keeps the steps
** of the 128 most recently used extents. With graph_replay, one graph is
** recorded per (extent, bound pointers). (Added in 2.4.)
*/
GE2_API ge2_status_t ge2_plan_execute_dynamic(ge2_plan_t* plan, int64_t extent,
                                              const ge2_binding_t* bindings, size_t num_bindings,
                                              void* stream);

/* ------------------------------------------------------------------------- */
/* One-shot GEMM + bias + activation                                         */
/* ------------------------------------------------------------------------- */

/*
** The one-shot call's parameter block. All matrices are row-major. Leading
** dimensions and batch strides are in elements; 0 means tight.
**   A: [batch,] M x K (trans_a: K x M), B: [batch,] K x N (trans_b: N x K),
**   D: [batch,] M x N, bias: N elements (shared by the batch).
*/
typedef struct ge2_gemm_params {
  uint32_t struct_size; /* set by ge2_gemm_params_init */
  int64_t m, n, k;
  int64_t batch; /* default 1 */
  int trans_a, trans_b;
  int64_t lda, ldb, ldd;
  int64_t stride_a, stride_b, stride_d;
  ge2_dtype_t dtype; /* of A, B, bias and D; default GE2_DTYPE_F16 */
  ge2_activation_t activation;
  int has_bias;
  float alpha; /* default 1 */
} ge2_gemm_params_t;

/* ge2_gemm_params_init_sized: fill the caller's struct of struct_size bytes with defaults:
** every field gets its default and struct_size is stored. struct_size below
** the 2.0 struct's size, or above this library's (a newer header), is
** GE2_ERROR_INVALID_ARGUMENT.
** Call it through the ge2_gemm_params_init macro below. (Added in 2.3.) */
GE2_API ge2_status_t ge2_gemm_params_init_sized(ge2_gemm_params_t* params, size_t struct_size);
/*
** ge2_gemm_params_init: fill *params with defaults (sizes zero: the caller
** sets them).
** The exported function of this name (the entry point of callers built
** against 2.2 headers) fills a 2.2-sized struct; the macro passes the
** caller's own size.
*/
GE2_API ge2_status_t(ge2_gemm_params_init)(ge2_gemm_params_t* params);
#define ge2_gemm_params_init(params) ge2_gemm_params_init_sized((params), sizeof *(params))

/*
** ge2_gemm_bias_act: D = act(alpha * op(A) * op(B) + bias) in one call. The
** compiled plan is cached in the context per parameter block (see
** one_shot_cache_size), so repeated calls cost one look-up. Pointers and
** stream follow ge2_plan_execute's rules, D included: D must not overlap A, B
** or bias. bias must be NULL exactly when has_bias is 0.
*/
GE2_API ge2_status_t ge2_gemm_bias_act(ge2_context_t* context, const ge2_gemm_params_t* params,
                                       const void* a, const void* b, const void* bias, void* d,
                                       void* stream);

#ifdef __cplusplus
}
#endif
#endif /* GE_V2_API_H */
