#include "exec/plan.hpp"

#include <cstdint>
#include <cstring>
#include <utility>

#include "core/checked_math.hpp"
#include "core/error.hpp"
#include "passes/pass.hpp"

namespace ge2 {
namespace {

nlohmann::json problem_json(const GemmProblem& p) {
  auto view = [](const MatrixView& v) {
    return nlohmann::json{{"rows", v.rows},
                          {"cols", v.cols},
                          {"row_stride", v.row_stride},
                          {"col_stride", v.col_stride},
                          {"batch_stride", v.batch_stride}};
  };
  nlohmann::json j{{"m", p.m},
                   {"n", p.n},
                   {"k", p.k},
                   {"batch", p.batch},
                   {"dtype", dtype_name(p.dtype)},
                   {"trans_a", p.trans_a},
                   {"trans_b", p.trans_b},
                   {"has_bias", p.has_bias},
                   {"activation", activation_name(p.act)},
                   {"alpha", p.alpha},
                   {"a", view(p.a)},
                   {"b", view(p.b)},
                   {"d", view(p.d)}};
  if (p.has_c) {
    j["c"] = view(p.c);
    j["beta"] = p.beta;
  }
  return j;
}

nlohmann::json selection_json(const Selection& selection) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const auto& c : selection.candidates) {
    nlohmann::json entry{{"kernel", kernel_name(c.kernel)}, {"feasible", c.feasible}};
    if (c.feasible) {
      entry["score_us"] = c.estimated_us;
      entry["measured"] = c.measured;
      entry["staged"] = c.staged;
    }
    entry["reason"] = c.reason;
    candidates.push_back(entry);
  }
  return {{"kernel", kernel_name(selection.kernel)},
          {"staged", selection.staged},
          {"why", selection.why},
          {"candidates", candidates}};
}

// The elementwise step of a bias add, an activation, an add, a multiply or a
// gated multiply, and the value its y operand reads. A kind without a step here
// is a compile error, never a silent substitute.
std::pair<ElementwiseProblem, ValueId> elementwise_problem(const Node& node,
                                                           const std::vector<TensorType>& storage,
                                                           ValueId id) {
  auto type_of = [&](ValueId v) -> const TensorType& {
    return storage[static_cast<std::size_t>(v)];
  };
  ElementwiseProblem problem;
  problem.x = type_of(node.x);
  problem.out = type_of(id);
  switch (node.kind) {
    case OpKind::BiasAdd:
      problem.has_bias = true;
      problem.bias_stride = type_of(node.bias).strides[0];
      return {problem, kNoValue};
    case OpKind::Activation:
      problem.act = node.act;
      return {problem, kNoValue};
    case OpKind::Add:
    case OpKind::Mul:
      problem.combine = node.kind == OpKind::Add ? Combine::Add : Combine::Mul;
      problem.x_act = node.act;
      problem.y = broadcast_to(type_of(node.y), problem.x);
      return {problem, node.y};
    case OpKind::GatedMul: {
      // x's two halves along its last dimension, read in place: act(first) * second.
      const int last = problem.x.rank - 1;
      problem.x.shape[last] /= 2;
      problem.y = problem.x;
      problem.y_offset = problem.x.shape[last] * problem.x.strides[last];
      problem.combine = Combine::Mul;
      problem.x_act = node.act;
      return {problem, node.x};
    }
    case OpKind::Input:
    case OpKind::Constant:
    case OpKind::Gemm:
    case OpKind::GemmBiasAct:
      break;
  }
  fail(GE2_ERROR_INTERNAL, "ge2_plan_compile: node {} ({}) has no elementwise step", id,
       op_kind_name(node.kind));
}

}  // namespace

std::unique_ptr<Plan> compile_plan(std::shared_ptr<Backend> backend_ptr, Graph graph,
                                   const CompileOptions& options) {
  Backend& backend = *backend_ptr;
  nlohmann::json passes_json = nlohmann::json::array();
  for (const PassRecord& record : run_pipeline(graph, options.fuse))
    passes_json.push_back({{"pass", record.pass}, {"notes", record.notes}});

  auto plan = std::make_unique<Plan>(backend_ptr);
  const auto count = static_cast<std::size_t>(graph.size());
  // The memory layout of every value: inputs as described, outputs as marked,
  // intermediates dense.
  std::vector<TensorType> storage(count);
  std::vector<int> slot_of(count, -1);
  for (ValueId id = 0; id < graph.size(); ++id)
    storage[static_cast<std::size_t>(id)] = graph.node(id).type;
  for (const auto& output : graph.outputs())
    if (output.layout) storage[static_cast<std::size_t>(output.value)] = *output.layout;

  auto new_slot = [&](void* owned_pointer, std::size_t io_bytes, bool is_output) {
    plan->slot_defaults_.push_back(owned_pointer);
    plan->io_bytes_.push_back(io_bytes);
    plan->io_is_output_.push_back(is_output);
    return static_cast<int>(plan->slot_defaults_.size()) - 1;
  };
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (node.kind != OpKind::Input) continue;
    const auto& type = storage[static_cast<std::size_t>(id)];
    const int slot = new_slot(nullptr, type.span_bytes(), false);
    slot_of[static_cast<std::size_t>(id)] = slot;
    plan->io_.push_back({node.input_name, false, type, slot});
  }
  for (const auto& output : graph.outputs()) {
    const auto& type = storage[static_cast<std::size_t>(output.value)];
    const int slot = new_slot(nullptr, type.span_bytes(), true);
    slot_of[static_cast<std::size_t>(output.value)] = slot;
    plan->io_.push_back({output.name, true, type, slot});
  }

  // All plan-owned buffers at once must fit, not only each one: three buffers
  // of two thirds of the memory each would pass a per-buffer check.
  std::size_t intermediate_bytes = 0, constant_bytes = 0;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (!node.live || node.kind == OpKind::Input || slot_of[static_cast<std::size_t>(id)] >= 0)
      continue;
    std::size_t& sum = node.kind == OpKind::Constant ? constant_bytes : intermediate_bytes;
    const auto total = checked_add_bytes(sum, storage[static_cast<std::size_t>(id)].span_bytes());
    require(total.has_value(), GE2_ERROR_OUT_OF_MEMORY,
            "ge2_plan_compile: the plan's buffers need more bytes than size_t holds");
    sum = *total;
  }
  const auto owned_bytes = checked_add_bytes(intermediate_bytes, constant_bytes);
  require(owned_bytes.has_value(), GE2_ERROR_OUT_OF_MEMORY,
          "ge2_plan_compile: the plan's buffers need more bytes than size_t holds");
  backend.check_plan_memory(*owned_bytes);

  // Constants: copied into the backend's memory now, so executions bind only inputs and outputs.
  nlohmann::json constants_json = nlohmann::json::array();
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (!node.live || node.kind != OpKind::Constant) continue;
    const std::size_t bytes = node.constant_data->size();
    auto buffer = backend.allocate(bytes);
    backend.upload(*buffer, node.constant_data->data(), bytes);
    slot_of[static_cast<std::size_t>(id)] = new_slot(buffer->data(), 0, false);
    plan->owned_.push_back(std::move(buffer));
    constants_json.push_back({{"name", node.input_name},
                              {"node", id},
                              {"type", storage[static_cast<std::size_t>(id)].shape_string()},
                              {"bytes", bytes}});
  }

  nlohmann::json steps_json = nlohmann::json::array();
  const DeviceInfo& device = backend.device();
  const MeasuredTime measured = backend.measured_times();
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (!node.live || node.is_source()) continue;
    auto& slot = slot_of[static_cast<std::size_t>(id)];
    if (slot < 0) {
      auto buffer = backend.allocate(storage[static_cast<std::size_t>(id)].span_bytes());
      slot = new_slot(buffer->data(), 0, false);
      plan->owned_.push_back(std::move(buffer));
    }
    auto slot_for = [&](ValueId v) {
      return v == kNoValue ? -1 : slot_of[static_cast<std::size_t>(v)];
    };
    nlohmann::json step_json{{"node", id},
                             {"op", op_kind_name(node.kind)},
                             {"fused_from", node.fused_from},
                             {"output", storage[static_cast<std::size_t>(id)].shape_string()}};
    if (node.is_gemm_family()) {
      const GemmProblem problem = make_gemm_problem(node, storage, id);
      Selection selection =
          select_gemm_kernel(problem, device, options.policy, measured, backend.gemm_kernels());
      const GemmSlots slots{slot_for(node.a), slot_for(node.b), slot_for(node.c),
                            slot_for(node.bias), slot};
      std::unique_ptr<Step> step;
      // Each refusal removes one candidate, so this ends: with a step, or with
      // GE2_ERROR_UNSUPPORTED when none is left or the kernel was forced.
      while (!step) {
        try {
          step = backend.make_gemm(problem, slots, selection.kernel, selection.staged);
        } catch (const Error& error) {
          if (error.status() != GE2_ERROR_UNSUPPORTED && error.status() != GE2_ERROR_CUBLAS) throw;
          refuse_and_reselect(selection, problem, options.policy, error.what());
        }
      }
      plan->steps_.push_back(std::move(step));
      step_json["problem"] = problem_json(problem);
      step_json["selection"] = selection_json(selection);
    } else {
      const auto [problem, y] = elementwise_problem(node, storage, id);
      plan->steps_.push_back(backend.make_elementwise(
          problem, {slot_for(node.x), slot_for(node.bias), slot, slot_for(y)}));
      step_json["activation"] = activation_name(problem.act);
      if (problem.x_act != Activation::None)
        step_json["input_activation"] = activation_name(problem.x_act);
    }
    step_json["kernel"] = plan->steps_.back()->describe();
    steps_json.push_back(step_json);
  }

  nlohmann::json io_json = nlohmann::json::array();
  for (const auto& io : plan->io_)
    io_json.push_back(
        {{"name", io.name}, {"output", io.is_output}, {"type", io.type.shape_string()}});
  const nlohmann::json description{{"backend", backend.describe()},
                                   {"graph_replay", options.graph_replay},
                                   {"intermediate_bytes", intermediate_bytes},
                                   {"constant_bytes", constant_bytes},
                                   {"constants", constants_json},
                                   {"passes", passes_json},
                                   {"io", io_json},
                                   {"steps", steps_json}};
  plan->description_ = description.dump(2);
  plan->state_.slots = plan->slot_defaults_;
  plan->state_.device_state = backend.make_plan_state(options.graph_replay);
  return plan;
}

void Plan::execute(const ge2_binding_t* bindings, std::size_t count, void* stream) {
  require(bindings != nullptr || count == 0, GE2_ERROR_INVALID_ARGUMENT,
          "ge2_plan_execute: argument 'bindings' is NULL with num_bindings = {}", count);
  // Checked before the array is read: a count larger than the array it
  // describes must not make ge2 read past it.
  require(count <= io_.size(), GE2_ERROR_INVALID_ARGUMENT,
          "ge2_plan_execute: argument 'num_bindings' = {} is more than the plan's {} inputs and "
          "outputs",
          count, io_.size());
  std::lock_guard lock(mutex_);
  state_.slots = slot_defaults_;
  state_.stream = stream;
  std::vector<bool> bound(io_.size(), false);
  for (std::size_t i = 0; i < count; ++i) {
    const ge2_binding_t& binding = bindings[i];
    require(binding.name != nullptr, GE2_ERROR_INVALID_ARGUMENT,
            "ge2_plan_execute: argument 'bindings[{}].name' is NULL", i);
    std::size_t index = 0;
    while (index < io_.size() && io_[index].name != binding.name) ++index;
    require(index < io_.size(), GE2_ERROR_INVALID_ARGUMENT,
            "ge2_plan_execute: argument 'bindings[{}].name' = '{}' is not an input or output of "
            "the plan",
            i, binding.name);
    require(!bound[index], GE2_ERROR_INVALID_ARGUMENT,
            "ge2_plan_execute: argument 'bindings[{}].name' = '{}' is bound twice", i,
            binding.name);
    require(binding.data != nullptr, GE2_ERROR_INVALID_ARGUMENT,
            "ge2_plan_execute: argument 'bindings[{}].data' for '{}' is NULL", i, binding.name);
    bound[index] = true;
    state_.slots[static_cast<std::size_t>(io_[index].slot)] = binding.data;
  }
  for (std::size_t index = 0; index < io_.size(); ++index) {
    require(bound[index], GE2_ERROR_INVALID_ARGUMENT,
            "ge2_plan_execute: argument 'bindings': {} '{}' is not bound",
            io_[index].is_output ? "output" : "input", io_[index].name);
  }
  check_outputs_do_not_overlap();
  backend_->execute(steps_, state_, io_bytes_, io_is_output_);
}

// Kernels read inputs while they write outputs (cuBLASLt and the reference loop
// alike), so an output sharing bytes with another binding gives wrong results.
void Plan::check_outputs_do_not_overlap() const {
  auto range_of = [&](const PlanIo& io) {
    const auto begin =
        reinterpret_cast<std::uintptr_t>(state_.slots[static_cast<std::size_t>(io.slot)]);
    return std::pair{begin, begin + io_bytes_[static_cast<std::size_t>(io.slot)]};
  };
  for (const PlanIo& output : io_) {
    if (!output.is_output) continue;
    const auto [begin, end] = range_of(output);
    for (const PlanIo& other : io_) {
      if (&other == &output) continue;
      const auto [other_begin, other_end] = range_of(other);
      require(end <= other_begin || other_end <= begin, GE2_ERROR_INVALID_ARGUMENT,
              "ge2_plan_execute: argument 'bindings': output '{}' ({} bytes at {:#x}) overlaps "
              "{} '{}' ({} bytes at {:#x}); an output must not share memory with another binding",
              output.name, end - begin, begin, other.is_output ? "output" : "input", other.name,
              other_end - other_begin, other_begin);
    }
  }
}

}  // namespace ge2
