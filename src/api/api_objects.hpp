// The structs behind the opaque handles of ge_v2_api.h.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>

#include "api/one_shot_cache.hpp"
#include "exec/backend.hpp"
#include "exec/plan.hpp"
#include "ir/graph.hpp"

struct ge2_context_s {
  ge2_context_s(std::shared_ptr<ge2::Backend> backend_, std::size_t one_shot_capacity)
      : backend(std::move(backend_)), one_shot_plans(one_shot_capacity) {}

  std::shared_ptr<ge2::Backend> backend;
  std::mutex mutex;  // guards the members below
  // Every distinct text ge2_context_describe returned: the header promises each
  // stays valid until the context is destroyed, so none is ever replaced.
  std::set<std::string> descriptions;
  ge2::OneShotCache one_shot_plans;  // ge2_gemm_bias_act's compiled plans
};

struct ge2_graph_s {
  ge2::Graph graph;
  mutable std::shared_mutex access;  // see api/graph_access.hpp
};

struct ge2_plan_s {
  std::unique_ptr<ge2::Plan> plan;
};
