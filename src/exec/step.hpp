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

// The pointer bound to `slot` for this execution (nullptr for an absent operand, slot -1).
inline void* slot_pointer(const ExecState& state, int slot) {
  return slot < 0 ? nullptr : state.slots[static_cast<std::size_t>(slot)];
}

class Step {
 public:
  virtual ~Step() = default;
  virtual void run(const ExecState& state) = 0;
  virtual nlohmann::json describe() const = 0;
  // Whether run() can take this execution's pointers (a TMA kernel needs 16-byte
  // aligned operands); a FusedStep runs its unfused steps when not.
  virtual bool accepts(const ExecState& state) const {
    (void)state;
    return true;
  }
};

// Two nodes computed by one step (a gated_mul in its GEMM's epilogue), with the
// two steps of the unfused form for the executions the fused step does not accept.
class FusedStep final : public Step {
 public:
  FusedStep(std::unique_ptr<Step> fused, std::vector<std::unique_ptr<Step>> unfused)
      : fused_(std::move(fused)), unfused_(std::move(unfused)) {}
  void run(const ExecState& state) override {
    if (fused_->accepts(state)) {
      fused_->run(state);
      return;
    }
    for (const auto& step : unfused_) step->run(state);
  }
  nlohmann::json describe() const override {
    nlohmann::json description = fused_->describe();
    nlohmann::json unfused = nlohmann::json::array();
    for (const auto& step : unfused_) unfused.push_back(step->describe());
    description["unaligned_pointers_run"] = unfused;
    return description;
  }

 private:
  std::unique_ptr<Step> fused_;
  std::vector<std::unique_ptr<Step>> unfused_;
};

}  // namespace ge2
