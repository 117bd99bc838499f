// One executable unit of a plan, and the memory slots it reads and writes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace ge2 {

// Per-plan state a backend keeps between executions (e.g. CUDA ordering events).
class PlanDeviceState {
 public:
  virtual ~PlanDeviceState() = default;
};

// Pointers for one execution: slot i holds the bound or plan-owned buffer of one value.
struct ExecState {
  std::vector<void*> slots;
  // Which of the plan's step lists runs (a dynamic plan has one per extent):
  // a recorded graph replays only for the list it was recorded from.
  std::uint64_t steps_id = 0;
  void* stream = nullptr;
  void* workspace = nullptr;  // device scratch for this stream (CUDA)
  std::size_t workspace_bytes = 0;
  std::unique_ptr<PlanDeviceState> device_state;
};

class Step {
 public:
  virtual ~Step() = default;
  virtual void run(const ExecState& state) = 0;
  virtual nlohmann::json describe() const = 0;
};

}  // namespace ge2
