// The structs behind the opaque handles of ge_v2_api.h.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "exec/backend.hpp"
#include "exec/plan.hpp"
#include "ir/graph.hpp"

struct ge2_context_s {
  std::shared_ptr<ge2::Backend> backend;
  std::mutex mutex;         // guards the members below
  std::string description;  // returned by ge2_context_describe
  std::map<std::string, std::shared_ptr<ge2::Plan>> one_shot_plans;  // ge2_gemm_bias_act cache
};

struct ge2_graph_s {
  ge2::Graph graph;
  std::atomic<bool> busy{false};  // detects two threads modifying one graph
};

struct ge2_plan_s {
  std::unique_ptr<ge2::Plan> plan;
};
