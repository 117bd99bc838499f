// One executable unit of a plan, and the memory slots it reads and writes.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

namespace ge2 {

// Pointers for one execution: slot i holds the bound or plan-owned buffer of one value.
struct ExecState {
  std::vector<void*> slots;
  void* stream = nullptr;
};

class Step {
 public:
  virtual ~Step() = default;
  virtual void run(const ExecState& state) = 0;
  virtual nlohmann::json describe() const = 0;
};

}  // namespace ge2
