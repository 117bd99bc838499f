// Context creation: backend choice, version negotiation, description.
#include <cstdlib>

#include "api/api_guard.hpp"
#include "api/api_objects.hpp"
#include "core/raw_enum.hpp"
#include "tunedb/tunedb_path.hpp"

using namespace ge2;

extern "C" {

ge2_status_t ge2_context_options_init(ge2_context_options_t* options) {
  return guarded(__func__, [&] {
    require_not_null(options, __func__, "options");
    *options = ge2_context_options_t{};
    options->struct_size = sizeof(ge2_context_options_t);
    options->device = GE2_DEVICE_AUTO;
    options->device_ordinal = 0;
    options->tune_mode = GE2_TUNE_CACHED;
    options->tunedb_path = nullptr;
  });
}

ge2_status_t ge2_context_create(int api_version, const ge2_context_options_t* options,
                                ge2_context_t** out) {
  return guarded(__func__, [&] {
    require(api_version == GE2_API_VERSION, GE2_ERROR_VERSION_MISMATCH,
            "{}: argument 'api_version' = {}: this library implements GE2_API_VERSION {}; rebuild "
            "the caller against its ge_v2_api.h",
            __func__, api_version, GE2_API_VERSION);
    require_not_null(out, __func__, "out");
    ge2_context_options_t defaults;
    ge2_context_options_init(&defaults);
    if (options == nullptr) options = &defaults;
    require_struct_size(*options, __func__, "options");
    const int device = raw_enum(options->device), tune_mode = raw_enum(options->tune_mode);
    require(device >= GE2_DEVICE_AUTO && device <= GE2_DEVICE_CPU, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'options->device' = {} is not a ge2_device_kind_t", __func__, device);
    require(tune_mode >= GE2_TUNE_OFF && tune_mode <= GE2_TUNE_TUNE, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'options->tune_mode' = {} is not a ge2_tune_mode_t", __func__, tune_mode);
    require(options->device_ordinal >= 0, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'options->device_ordinal' = {} is negative", __func__,
            options->device_ordinal);

    auto context = std::make_unique<ge2_context_s>();
    const bool want_cuda = options->device == GE2_DEVICE_CUDA ||
                           (options->device == GE2_DEVICE_AUTO && cuda_backend_available());
    if (want_cuda) {
      context->backend = make_cuda_backend(options->device_ordinal, options->tune_mode,
                                           resolve_tunedb_path(options->tunedb_path));
    } else {
      context->backend = make_cpu_backend();
    }
    *out = context.release();
  });
}

void ge2_context_destroy(ge2_context_t* context) { std::unique_ptr<ge2_context_s> owned(context); }

ge2_status_t ge2_context_get_device_kind(const ge2_context_t* context, ge2_device_kind_t* out) {
  return guarded(__func__, [&] {
    require_not_null(context, __func__, "context");
    require_not_null(out, __func__, "out");
    *out = context->backend->kind();
  });
}

ge2_status_t ge2_context_describe(ge2_context_t* context, const char** json_out) {
  return guarded(__func__, [&] {
    require_not_null(context, __func__, "context");
    require_not_null(json_out, __func__, "json_out");
    std::lock_guard lock(context->mutex);
    nlohmann::json description = context->backend->describe();
    description["api_version"] = GE2_API_VERSION;
    description["version"] = GE2_VERSION_STRING;
    context->description = description.dump(2);
    *json_out = context->description.c_str();
  });
}

}  // extern "C"
