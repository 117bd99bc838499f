// A compiled plan: steps with their kernels, the buffers it owns, and its text.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/backend.hpp"
#include "ir/graph.hpp"

namespace ge2 {

struct CompileOptions {
  bool fuse = true;
  bool graph_replay = false;  // CUDA: replay a recorded CUDA graph while the bindings repeat
  SelectionPolicy policy;
};

struct PlanIo {
  std::string name;
  bool is_output = false;
  TensorType type;  // with the strides the bound memory has
  int slot = -1;
};

class Plan {
 public:
  explicit Plan(std::shared_ptr<Backend> backend) : backend_(std::move(backend)) {}

  const std::vector<PlanIo>& io() const { return io_; }
  const std::string& description() const { return description_; }
  void execute(const ge2_binding_t* bindings, std::size_t count, void* stream);

 private:
  void check_outputs_do_not_overlap() const;

  friend std::unique_ptr<Plan> compile_plan(std::shared_ptr<Backend> backend, Graph graph,
                                            const CompileOptions& options);
  std::shared_ptr<Backend> backend_;  // shared so a plan outlives its context safely
  std::vector<PlanIo> io_;
  std::vector<std::unique_ptr<Buffer>> owned_;
  std::vector<void*> slot_defaults_;  // owned buffers; nullptr where the caller binds
  std::vector<std::size_t> io_bytes_;
  std::vector<bool> io_is_output_;
  std::vector<std::unique_ptr<Step>> steps_;
  std::string description_;
  std::mutex mutex_;
  ExecState state_;  // reused between executions (guarded by mutex_)
};

// Runs the passes on (a copy of) the graph, selects kernels and builds the plan.
std::unique_ptr<Plan> compile_plan(std::shared_ptr<Backend> backend, Graph graph,
                                   const CompileOptions& options);

}  // namespace ge2
