// Context creation: backend choice, version negotiation, description.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "api/api_guard.hpp"
#include "api/api_objects.hpp"
#include "core/log.hpp"
#include "core/raw_enum.hpp"
#include "tunedb/tunedb_path.hpp"

using namespace ge2;

namespace {

constexpr std::uint32_t kDefaultOneShotCacheSize = 1024;
constexpr unsigned kMaxCpuThreads = 1024;

// $GE2_CPU_THREADS: the most threads a CPU-backend GEMM uses; 0 (unset or empty)
// for the backend's default.
unsigned cpu_gemm_threads(const char* function) {
  const char* text = std::getenv("GE2_CPU_THREADS");
  if (text == nullptr || *text == '\0') return 0;
  unsigned value = 0;
  const char* end = text + std::strlen(text);
  const auto [stop, error] = std::from_chars(text, end, value);
  require(error == std::errc{} && stop == end && value >= 1 && value <= kMaxCpuThreads,
          GE2_ERROR_INVALID_ARGUMENT,
          "{}: $GE2_CPU_THREADS = '{}' is not a thread count from 1 to {} (unset it for the "
          "default)",
          function, text, kMaxCpuThreads);
  return value;
}

// 2.0 and 2.1 callers' struct ends after tunedb_path; one_shot_cache_size came in 2.2.
constexpr std::size_t kOptionsSize21 =
    offsetof(ge2_context_options_t, tunedb_path) + sizeof(const char*);
// The struct as 2.2 declared it: ge2_context_options_init, the 2.2 entry point,
// keeps filling this many bytes.
constexpr std::size_t kOptionsSize22 = 32;
static_assert(offsetof(ge2_context_options_t, one_shot_cache_size) == 24 &&
                  offsetof(ge2_context_options_t, log_callback) == kOptionsSize22 &&
                  offsetof(ge2_context_options_t, log_level) == 48 &&
                  sizeof(ge2_context_options_t) == 56,
              "ge2_context_options_t's layout is part of the ABI: append fields, and keep "
              "kOptionsSize22 for the 2.2 entry point");

ge2_context_options_t default_options() {
  ge2_context_options_t options{};
  options.struct_size = sizeof(ge2_context_options_t);
  options.device = GE2_DEVICE_AUTO;
  options.device_ordinal = 0;
  options.tune_mode = GE2_TUNE_CACHED;
  options.tunedb_path = nullptr;
  options.one_shot_cache_size = kDefaultOneShotCacheSize;
  options.log_callback = nullptr;
  options.log_user_data = nullptr;
  options.log_level = GE2_LOG_DEFAULT;
  return options;
}

}  // namespace

extern "C" {

ge2_status_t ge2_context_options_init_sized(ge2_context_options_t* options, size_t struct_size) {
  return guarded(__func__, [&](const char* f) {
    init_struct(options, struct_size, default_options(), kOptionsSize21, f, "options");
  });
}

// The 2.2 entry point: callers built against 2.2 headers pass 2.2-sized structs.
ge2_status_t(ge2_context_options_init)(ge2_context_options_t* options) {
  return guarded(__func__, [&](const char* f) {
    init_struct(options, kOptionsSize22, default_options(), kOptionsSize21, f, "options");
  });
}

ge2_status_t ge2_context_create(int api_version, const ge2_context_options_t* options,
                                ge2_context_t** out) {
  return guarded(__func__, [&](const char* f) {
    require(api_version == GE2_API_VERSION, GE2_ERROR_VERSION_MISMATCH,
            "{}: argument 'api_version' = {}: this library implements GE2_API_VERSION {}; rebuild "
            "the caller against its ge_v2_api.h",
            f, api_version, GE2_API_VERSION);
    require_not_null(out, f, "out");
    const ge2_context_options_t defaults = default_options();
    if (options == nullptr) options = &defaults;
    require_struct_size(*options, f, "options", kOptionsSize21);
    const std::uint32_t one_shot_cache_size =
        has_member(*options,
                   offsetof(ge2_context_options_t, one_shot_cache_size) + sizeof(std::uint32_t))
            ? options->one_shot_cache_size
            : kDefaultOneShotCacheSize;
    const int device = raw_enum(options->device), tune_mode = raw_enum(options->tune_mode);
    require(device >= GE2_DEVICE_AUTO && device <= GE2_DEVICE_CPU, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'options->device' = {} is not a ge2_device_kind_t", f, device);
    require(tune_mode >= GE2_TUNE_OFF && tune_mode <= GE2_TUNE_TUNE, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'options->tune_mode' = {} is not a ge2_tune_mode_t", f, tune_mode);
    require(options->device_ordinal >= 0, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'options->device_ordinal' = {} is negative", f, options->device_ordinal);
    Logger logger;
    if (has_member(*options, offsetof(ge2_context_options_t, log_level) + sizeof(int))) {
      const int level = raw_enum(options->log_level);
      require(level >= GE2_LOG_DEFAULT && level <= GE2_LOG_INFO, GE2_ERROR_INVALID_ARGUMENT,
              "{}: argument 'options->log_level' = {} is not a ge2_log_level_t", f, level);
      logger = Logger(options->log_callback, options->log_user_data, options->log_level);
    }

    const bool want_cuda = options->device == GE2_DEVICE_CUDA ||
                           (options->device == GE2_DEVICE_AUTO && cuda_backend_available());
    if (options->device == GE2_DEVICE_AUTO && !want_cuda)
      logger(LogLevel::Warning,
             "device AUTO: {}; the context runs on the CPU reference backend (pass "
             "GE2_DEVICE_CUDA to make this an error)",
             cuda_backend_built() ? "no CUDA device answers" : "this ge2 was built without CUDA");
    std::shared_ptr<Backend> backend =
        want_cuda ? make_cuda_backend(options->device_ordinal, options->tune_mode,
                                      resolve_tunedb_path(options->tunedb_path), logger)
                  : make_cpu_backend(cpu_gemm_threads(f));
    const char* record = std::getenv("GE2_TUNE_RECORD");
    *out = std::make_unique<ge2_context_s>(std::move(backend), one_shot_cache_size, logger,
                                           record != nullptr ? record : "")
               .release();
  });
}

void ge2_context_destroy(ge2_context_t* context) { std::unique_ptr<ge2_context_s> owned(context); }

ge2_status_t ge2_context_get_device_kind(const ge2_context_t* context, ge2_device_kind_t* out) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(context, f, "context");
    require_not_null(out, f, "out");
    *out = context->backend->kind();
  });
}

ge2_status_t ge2_context_describe(ge2_context_t* context, const char** json_out) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(context, f, "context");
    require_not_null(json_out, f, "json_out");
    std::lock_guard lock(context->mutex);
    nlohmann::json description = context->backend->describe();
    description["api_version"] = GE2_API_VERSION;
    description["version"] = GE2_VERSION_STRING;
    const OneShotCache& cache = context->one_shot_plans;
    description["one_shot_cache"] = {{"size", cache.size()},
                                     {"capacity", cache.capacity()},
                                     {"hits", cache.hits()},
                                     {"misses", cache.misses()},
                                     {"evictions", cache.evictions()}};
    *json_out = context->descriptions.insert(description.dump(2)).first->c_str();
  });
}

}  // extern "C"
