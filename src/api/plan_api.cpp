// Plan compilation, description, I/O enumeration and execution.
#include <cmath>
#include <cstddef>
#include <cstdlib>

#include "api/api_guard.hpp"
#include "api/api_objects.hpp"
#include "api/graph_access.hpp"

using namespace ge2;

namespace ge2 {
namespace {

// 2.0 callers' struct ends after force_kernel; graph_replay came in 2.1.
constexpr std::size_t kCompileOptionsSize20 =
    offsetof(ge2_compile_options_t, force_kernel) + sizeof(const char*);
// The struct as 2.1 to 2.4 declare it; the 2.2 entry point keeps filling this many bytes.
// 2.5's allow_fp8 sits in its tail padding and is read only with fp8_max_error
// after it, so a 2.4 caller's padding is never taken for a flag.
constexpr std::size_t kCompileOptionsSize22 = 32;
static_assert(offsetof(ge2_compile_options_t, graph_replay) == 24 &&
                  offsetof(ge2_compile_options_t, allow_fp8) == 28 &&
                  offsetof(ge2_compile_options_t, fp8_max_error) == kCompileOptionsSize22 &&
                  sizeof(ge2_compile_options_t) == 40,
              "ge2_compile_options_t's layout is part of the ABI: append fields, and keep "
              "kCompileOptionsSize22 for the 2.2 entry point");

ge2_compile_options_t default_compile_options() {
  ge2_compile_options_t options{};
  options.struct_size = sizeof(ge2_compile_options_t);
  options.fuse = 1;
  options.allow_tf32 = 0;
  options.allow_staging = 1;
  options.force_kernel = nullptr;
  options.graph_replay = 0;
  options.allow_fp8 = 0;
  options.fp8_max_error = 0.1f;
  return options;
}

// Input or output `index` of the plan, for the ge2_plan_io_* functions.
const PlanIo& io_at(const ge2_plan_t* plan, size_t index, const char* function) {
  require_not_null(plan, function, "plan");
  const auto& io = plan->plan->io();
  require(index < io.size(), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'index' = {} is out of range (the plan has {} inputs and outputs)",
          function, index, io.size());
  return io[index];
}

// "lt_f16, lt_bf16, ...": every row of the kernel table.
std::string kernel_names() {
  std::string names;
  for (const KernelInfo& row : kKernels)
    names += (names.empty() ? "" : ", ") + std::string(row.name);
  return names;
}

}  // namespace

CompileOptions compile_options_from(const ge2_compile_options_t* options, const char* function) {
  CompileOptions result;
  if (options != nullptr) {
    require_struct_size(*options, function, "options", kCompileOptionsSize20);
    result.fuse = options->fuse != 0;
    result.policy.allow_tf32 = options->allow_tf32 != 0;
    result.policy.allow_staging = options->allow_staging != 0;
    if (has_member(*options, offsetof(ge2_compile_options_t, graph_replay) + sizeof(int)))
      result.graph_replay = options->graph_replay != 0;
    if (has_member(*options, offsetof(ge2_compile_options_t, fp8_max_error) + sizeof(float))) {
      result.policy.allow_fp8 = options->allow_fp8 != 0;
      // Read only under allow_fp8: a caller that zeroed the struct keeps working.
      const float budget = options->fp8_max_error;
      require(
          !result.policy.allow_fp8 || (std::isfinite(budget) && budget > 0.0f && budget <= 1.0f),
          GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'options->fp8_max_error' = {} is not a finite value in (0, 1]", function,
          budget);
      if (result.policy.allow_fp8) result.policy.fp8_max_error = budget;
    }
  }
  const char* forced = options != nullptr ? options->force_kernel : nullptr;
  const char* source = "options->force_kernel";
  if (forced == nullptr) {
    forced = std::getenv("GE2_FORCE_KERNEL");
    source = "$GE2_FORCE_KERNEL";
    if (forced != nullptr && *forced == '\0') forced = nullptr;
  }
  if (forced != nullptr) {
    result.policy.forced = kernel_from_name(forced);
    require(result.policy.forced.has_value(), GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument '{}' = '{}' is not a kernel ({})", function, source, forced,
            kernel_names());
  }
  return result;
}

}  // namespace ge2

extern "C" {

ge2_status_t ge2_compile_options_init_sized(ge2_compile_options_t* options, size_t struct_size) {
  return guarded(__func__, [&](const char* f) {
    init_struct(options, struct_size, default_compile_options(), kCompileOptionsSize20, f,
                "options");
  });
}

// The 2.2 entry point: callers built against 2.2 headers pass 2.2-sized structs.
ge2_status_t(ge2_compile_options_init)(ge2_compile_options_t* options) {
  return guarded(__func__, [&](const char* f) {
    init_struct(options, kCompileOptionsSize22, default_compile_options(), kCompileOptionsSize20, f,
                "options");
  });
}

ge2_status_t ge2_plan_compile(ge2_context_t* context, const ge2_graph_t* graph,
                              const ge2_compile_options_t* options, ge2_plan_t** out) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(context, f, "context");
    const GraphReadLock lock(graph, f);
    require_not_null(out, f, "out");
    const CompileOptions compile_options = compile_options_from(options, f);
    auto plan = std::make_unique<ge2_plan_s>();
    plan->plan = compile_plan(context->backend, graph->graph, compile_options);
    record_selected_gemms(*context, *plan->plan);
    *out = plan.release();
  });
}

void ge2_plan_destroy(ge2_plan_t* plan) { std::unique_ptr<ge2_plan_s> owned(plan); }

ge2_status_t ge2_plan_describe(const ge2_plan_t* plan, const char** json_out) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(plan, f, "plan");
    require_not_null(json_out, f, "json_out");
    *json_out = plan->plan->description().c_str();
  });
}

ge2_status_t ge2_plan_io_count(const ge2_plan_t* plan, size_t* out) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(plan, f, "plan");
    require_not_null(out, f, "out");
    *out = plan->plan->io().size();
  });
}

ge2_status_t ge2_plan_io_info(const ge2_plan_t* plan, size_t index, ge2_io_info_t* out) {
  return guarded(__func__, [&](const char* f) {
    const PlanIo& io = io_at(plan, index, f);
    require_not_null(out, f, "out");
    out->name = io.name.c_str();
    out->is_output = io.is_output ? 1 : 0;
    out->desc = io.type.to_desc();
    out->required_bytes = io.type.span_bytes();
  });
}

ge2_status_t ge2_plan_get_max_extent(const ge2_plan_t* plan, int64_t* out) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(plan, f, "plan");
    require_not_null(out, f, "out");
    *out = plan->plan->max_extent();
  });
}

ge2_status_t ge2_plan_io_is_dynamic(const ge2_plan_t* plan, size_t index, int* out) {
  return guarded(__func__, [&](const char* f) {
    const PlanIo& io = io_at(plan, index, f);
    require_not_null(out, f, "out");
    *out = io.type.dynamic ? 1 : 0;
  });
}

ge2_status_t ge2_plan_execute(ge2_plan_t* plan, const ge2_binding_t* bindings, size_t num_bindings,
                              void* stream) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(plan, f, "plan");
    plan->plan->execute(bindings, num_bindings, stream);
  });
}

ge2_status_t ge2_plan_execute_dynamic(ge2_plan_t* plan, int64_t extent,
                                      const ge2_binding_t* bindings, size_t num_bindings,
                                      void* stream) {
  return guarded(__func__, [&](const char* f) {
    require_not_null(plan, f, "plan");
    plan->plan->execute_at(extent, bindings, num_bindings, stream);
  });
}

}  // extern "C"
