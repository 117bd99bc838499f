// Exclusive access for the functions that build a graph, shared access for those
// that read it. Both try the lock: a call that conflicts with another thread's
// use of the same graph is refused with a message (the header's promise)
// instead of racing with it or waiting for it.
#pragma once

#include <mutex>
#include <shared_mutex>

#include "api/api_guard.hpp"
#include "api/api_objects.hpp"

namespace ge2 {

class GraphWriteLock {
 public:
  GraphWriteLock(ge2_graph_t* graph, const char* function) {
    require_not_null(graph, function, "graph");
    lock_ = std::unique_lock(graph->access, std::try_to_lock);
    require(lock_.owns_lock(), GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'graph' is in use by another thread", function);
  }

 private:
  std::unique_lock<std::shared_mutex> lock_;
};

class GraphReadLock {
 public:
  GraphReadLock(const ge2_graph_t* graph, const char* function) {
    require_not_null(graph, function, "graph");
    lock_ = std::shared_lock(graph->access, std::try_to_lock);
    require(lock_.owns_lock(), GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'graph' is being modified by another thread", function);
  }

 private:
  std::shared_lock<std::shared_mutex> lock_;
};

}  // namespace ge2
