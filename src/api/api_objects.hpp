// The structs behind the opaque handles of ge_v2_api.h.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>

#include "api/one_shot_cache.hpp"
#include "core/log.hpp"
#include "exec/backend.hpp"
#include "exec/plan.hpp"
#include "ir/graph.hpp"

struct ge2_context_s {
  ge2_context_s(std::shared_ptr<ge2::Backend> backend_, std::size_t one_shot_capacity,
                const ge2::Logger& logger_, std::string gemm_record_path_)
      : backend(std::move(backend_)),
        logger(logger_),
        one_shot_plans(one_shot_capacity),
        gemm_record_path(std::move(gemm_record_path_)) {}

  std::shared_ptr<ge2::Backend> backend;
  const ge2::Logger logger;  // the context's diagnostics
  std::mutex mutex;          // guards the members below
  // Every distinct text ge2_context_describe returned: the header promises each
  // stays valid until the context is destroyed, so none is ever replaced.
  std::set<std::string> descriptions;
  ge2::OneShotCache one_shot_plans;  // ge2_gemm_bias_act's compiled plans
  // $GE2_TUNE_RECORD at creation: the file the GEMM problems of compiled plans
  // are appended to (tunedb/gemm_record.hpp); cleared after a failed append.
  std::string gemm_record_path;
};

namespace ge2 {
// Appends the GEMM problems `plan` selected kernels for to the context's record
// file, if it has one; a failure is logged once and ends recording, never the compile.
void record_selected_gemms(ge2_context_s& context, const Plan& plan);
// The caller's compile options (NULL: the defaults), with $GE2_FORCE_KERNEL where
// they force no kernel; a bad value is refused naming `function` and the argument.
CompileOptions compile_options_from(const ge2_compile_options_t* options, const char* function);
}  // namespace ge2

struct ge2_graph_s {
  ge2::Graph graph;
  mutable std::shared_mutex access;  // see api/graph_access.hpp
};

struct ge2_plan_s {
  std::unique_ptr<ge2::Plan> plan;
};
