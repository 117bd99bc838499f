#include "exec/plan.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include "core/checked_math.hpp"
#include "core/error.hpp"
#include "exec/fp8_gate.hpp"
#include "passes/pass.hpp"
#include "tunedb/tune_record.hpp"

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

// The GEMM node's problem; B marked when it is a constant of the plan.
GemmProblem gemm_problem(const Graph& graph, const Node& node,
                         const std::vector<TensorType>& storage, ValueId id) {
  GemmProblem problem = make_gemm_problem(node, storage, id);
  problem.b_constant = graph.node(node.b).kind == OpKind::Constant;
  return problem;
}

// Every value's layout at `extent`: dynamic values get it as their leading dimension.
std::vector<TensorType> storage_at(const std::vector<TensorType>& storage, std::int64_t extent) {
  std::vector<TensorType> types;
  types.reserve(storage.size());
  for (const TensorType& type : storage) types.push_back(type.at_extent(extent));
  return types;
}

// The extents that share kernel choices: the tuning database's size buckets
// (1, 2, 3-4, ... 129-256, then multiples of 256), the last one ending at the bound.
std::vector<std::pair<std::int64_t, std::int64_t>> extent_buckets(std::int64_t bound) {
  std::vector<std::pair<std::int64_t, std::int64_t>> buckets;
  for (std::int64_t first = 1; first <= bound;) {
    const std::int64_t last = std::min(size_bucket(first), bound);
    buckets.emplace_back(first, last);
    first = last + 1;
  }
  return buckets;
}

// The bound all dynamic inputs share (0 without any); differing bounds are refused.
std::int64_t dynamic_bound(const Graph& graph) {
  std::int64_t bound = 0;
  std::string first;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (node.kind != OpKind::Input || !node.type.dynamic) continue;
    require(bound == 0 || node.type.shape[0] == bound, GE2_ERROR_SHAPE_MISMATCH,
            "ge2_plan_compile: dynamic input '{}' has bound {} but '{}' has {}; all dynamic "
            "inputs share one extent",
            node.input_name, node.type.shape[0], first, bound);
    if (bound == 0) first = node.input_name;
    bound = node.type.shape[0];
  }
  return bound;
}

}  // namespace

std::unique_ptr<Plan> compile_plan(std::shared_ptr<Backend> backend_ptr, Graph graph,
                                   const CompileOptions& options) {
  Backend& backend = *backend_ptr;
  const bool describe = options.describe;
  nlohmann::json passes_json = nlohmann::json::array();
  for (const PassRecord& record : run_pipeline(graph, options.fuse))
    if (describe) passes_json.push_back({{"pass", record.pass}, {"notes", record.notes}});

  auto plan = std::make_unique<Plan>(backend_ptr);
  plan->options_ = options;
  plan->max_extent_ = dynamic_bound(graph);
  plan->lay_out_io(graph);
  nlohmann::json constants_json = nlohmann::json::array();
  const auto owned = plan->allocate_owned(graph, describe ? &constants_json : nullptr);
  plan->graph_ = std::move(graph);

  const std::int64_t bound = plan->max_extent_;
  const MeasuredTime measured = backend.measured_times();
  if (bound > 0) {
    // Kernels per bucket, each chosen (and in tuning mode tuned) at the
    // bucket's largest extent; the steps at the bound use the last bucket's.
    for (const auto& [first, last] : extent_buckets(bound))
      plan->buckets_.push_back(
          {first, last, plan->select_gemms(storage_at(plan->storage_, last), measured)});
  } else {
    plan->fixed_ = plan->select_gemms(plan->storage_, measured);
  }
  nlohmann::json description;
  if (describe)
    description = {{"backend", backend.describe()},
                   {"graph_replay", options.graph_replay},
                   {"intermediate_bytes", owned.intermediates},
                   {"constant_bytes", owned.constants},
                   {"constants", constants_json},
                   {"passes", passes_json}};
  if (options.policy.allow_fp8) {
    nlohmann::json fp8 = plan->apply_fp8_policy();
    if (describe) description["fp8"] = std::move(fp8);
  }
  plan->prepare_gated_weights();
  if (bound > 0 && describe)
    description["dynamic"] = {{"max_extent", bound},
                              {"kept_step_lists", Plan::kMaxStepLists},
                              {"buckets", plan->buckets_text()}};

  nlohmann::json steps_json = nlohmann::json::array();
  nlohmann::json* const steps_text = describe ? &steps_json : nullptr;
  plan->full_ = bound > 0 ? plan->build_steps(bound, plan->buckets_.back().selections,
                                              TuneUse::AsContext, steps_text)
                          : plan->build_steps(0, plan->fixed_, TuneUse::AsContext, steps_text);
  if (describe) {
    nlohmann::json io_json = nlohmann::json::array();
    for (const auto& io : plan->io_)
      io_json.push_back(
          {{"name", io.name}, {"output", io.is_output}, {"type", io.type.shape_string()}});
    description["io"] = io_json;
    description["steps"] = steps_json;
    plan->description_ = description.dump(2);
  }
  plan->state_.slots = plan->slot_defaults_;
  plan->state_.device_state = backend.make_plan_state(options.graph_replay);
  return plan;
}

void Plan::lay_out_io(const Graph& graph) {
  const auto count = static_cast<std::size_t>(graph.size());
  // The memory layout of every value: inputs as described, outputs as marked,
  // intermediates dense.
  storage_.resize(count);
  slot_of_.assign(count, -1);
  for (ValueId id = 0; id < graph.size(); ++id)
    storage_[static_cast<std::size_t>(id)] = graph.node(id).type;
  for (const auto& output : graph.outputs())
    if (output.layout) storage_[static_cast<std::size_t>(output.value)] = *output.layout;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (node.kind != OpKind::Input) continue;
    const int slot = add_slot(nullptr, false);
    slot_of_[static_cast<std::size_t>(id)] = slot;
    io_.push_back({node.input_name, false, storage_[static_cast<std::size_t>(id)], slot});
  }
  for (const auto& output : graph.outputs()) {
    const int slot = add_slot(nullptr, true);
    slot_of_[static_cast<std::size_t>(output.value)] = slot;
    io_.push_back({output.name, true, storage_[static_cast<std::size_t>(output.value)], slot});
  }
}

Plan::OwnedBytes Plan::allocate_owned(Graph& graph, nlohmann::json* constants_json) {
  Backend& backend = *backend_;
  auto plan_owned = [&](const Node& node, ValueId id) {
    return node.live && node.kind != OpKind::Input && slot_of_[static_cast<std::size_t>(id)] < 0;
  };
  // All plan-owned buffers at once must fit, not only each one: three buffers
  // of two thirds of the memory each would pass a per-buffer check.
  OwnedBytes owned;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (!plan_owned(node, id)) continue;
    std::size_t& sum = node.kind == OpKind::Constant ? owned.constants : owned.intermediates;
    const auto total = checked_add_bytes(sum, storage_[static_cast<std::size_t>(id)].span_bytes());
    require(total.has_value(), GE2_ERROR_OUT_OF_MEMORY,
            "ge2_plan_compile: the plan's buffers need more bytes than size_t holds");
    sum = *total;
  }
  const auto owned_bytes = checked_add_bytes(owned.intermediates, owned.constants);
  require(owned_bytes.has_value(), GE2_ERROR_OUT_OF_MEMORY,
          "ge2_plan_compile: the plan's buffers need more bytes than size_t holds");
  backend.check_plan_memory(*owned_bytes);

  // Constants: copied into the backend's memory now, so executions bind only
  // inputs and outputs; intermediates: sized once, for the bound.
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node& node = graph.node(id);
    if (!plan_owned(node, id)) continue;
    const TensorType& type = storage_[static_cast<std::size_t>(id)];
    auto buffer = backend.allocate(node.kind == OpKind::Constant ? node.constant_data->size()
                                                                 : type.span_bytes());
    if (node.kind == OpKind::Constant) {
      const std::size_t bytes = node.constant_data->size();
      backend.upload(*buffer, node.constant_data->data(), bytes);
      if (constants_json)
        constants_json->push_back({{"name", node.input_name},
                                   {"node", id},
                                   {"type", type.shape_string()},
                                   {"bytes", bytes}});
      node.constant_data.reset();  // the plan keeps the backend's copy only
    }
    slot_of_[static_cast<std::size_t>(id)] = add_slot(buffer->data(), false);
    owned_.push_back(std::move(buffer));
  }
  return owned;
}

std::vector<Selection> Plan::select_gemms(const std::vector<TensorType>& types,
                                          const MeasuredTime& measured) {
  Backend& backend = *backend_;
  std::vector<Selection> selections(static_cast<std::size_t>(graph_.size()));
  for (ValueId id = 0; id < graph_.size(); ++id) {
    const Node& node = graph_.node(id);
    if (!node.live || !node.is_gemm_family()) continue;
    // A GEMM read only by a gated_mul is ranked with the multiply: kernels
    // without a gated epilogue pay its pass.
    const ValueId reader = gated_reader(id);
    selected_problems_.push_back(reader != kNoValue ? gated_problem(types, id, reader)
                                                    : gemm_problem(graph_, node, types, id));
    selections[static_cast<std::size_t>(id)] =
        select_gemm_kernel(selected_problems_.back(), backend.device(), options_.policy, measured,
                           backend.gemm_kernels());
  }
  return selections;
}

nlohmann::json Plan::buckets_text() const {
  nlohmann::json buckets = nlohmann::json::array();
  for (const ExtentBucket& bucket : buckets_) {
    nlohmann::json gemms = nlohmann::json::array();
    for (ValueId id = 0; id < graph_.size(); ++id) {
      const Node& node = graph_.node(id);
      if (!node.live || !node.is_gemm_family()) continue;
      const Selection& selection = bucket.selections[static_cast<std::size_t>(id)];
      gemms.push_back({{"node", id},
                       {"kernel", kernel_name(selection.kernel)},
                       {"staged", selection.staged},
                       {"why", selection.why}});
    }
    buckets.push_back({{"first", bucket.first}, {"last", bucket.last}, {"gemms", gemms}});
  }
  return buckets;
}

std::unique_ptr<StepList> Plan::build_steps(std::int64_t extent,
                                            const std::vector<Selection>& chosen, TuneUse tune,
                                            nlohmann::json* steps_json) {
  Backend& backend = *backend_;
  auto list = std::make_unique<StepList>();
  list->extent = extent;
  list->id = next_list_id_++;
  list->io_bytes.assign(slot_defaults_.size(), 0);
  for (const PlanIo& io : io_)
    list->io_bytes[static_cast<std::size_t>(io.slot)] = io.type.at_extent(extent).span_bytes();
  const std::vector<TensorType> storage = storage_at(storage_, extent);
  auto slot_for = [&](ValueId v) {
    return v == kNoValue ? -1 : slot_of_[static_cast<std::size_t>(v)];
  };
  // Each GEMM's kernel as chosen for this list, then as its step was built; and
  // whether its step writes its output's amax (the FP8 amax hand-off).
  std::vector<KernelId> kernels(static_cast<std::size_t>(graph_.size()), KernelId::CpuRef);
  for (ValueId id = 0; id < graph_.size(); ++id)
    if (graph_.node(id).live && graph_.node(id).is_gemm_family())
      kernels[static_cast<std::size_t>(id)] = chosen[static_cast<std::size_t>(id)].kernel;
  std::vector<bool> writes_amax(static_cast<std::size_t>(graph_.size()), false);
  // gated_mul nodes whose multiply their GEMM's step computes.
  std::vector<bool> fused_into_gemm(static_cast<std::size_t>(graph_.size()), false);
  // The plan text is built only when asked for: steps rebuilt at a new extent and
  // one-shot plans are never shown, and their text costs more than their steps.
  const bool describe = steps_json != nullptr;
  nlohmann::json step_json;
  auto note = [&](const char* key, auto&& value_of) {
    if (describe) step_json[key] = value_of();
  };
  // The elementwise step of node `id` (not a GEMM); `noted`: it is the step the
  // text describes, not the unfused fallback of a gated epilogue.
  auto elementwise_step = [&](ValueId id, bool noted) {
    const Node& node = graph_.node(id);
    const auto [problem, y] = elementwise_problem(node, storage, id);
    if (noted) {
      note("activation", [act = problem.act] { return activation_name(act); });
      if (problem.x_act != Activation::None)
        note("input_activation", [act = problem.x_act] { return activation_name(act); });
    }
    return backend.make_elementwise(
        problem, {slot_for(node.x), slot_for(node.bias), slot_for(id), slot_for(y)});
  };
  for (ValueId id = 0; id < graph_.size(); ++id) {
    const Node& node = graph_.node(id);
    if (!node.live || node.is_source() || fused_into_gemm[static_cast<std::size_t>(id)]) continue;
    const int slot = slot_for(id);
    if (describe)
      step_json = {{"node", id},
                   {"op", op_kind_name(node.kind)},
                   {"fused_from", node.fused_from},
                   {"output", storage[static_cast<std::size_t>(id)].shape_string()}};
    if (node.is_gemm_family()) {
      const GemmProblem problem = gemm_problem(graph_, node, storage, id);
      Selection selection = chosen[static_cast<std::size_t>(id)];
      const auto prepared = b_prepared_slot_.find(id);
      GemmSlots slots{slot_for(node.a),
                      slot_for(node.b),
                      slot_for(node.c),
                      slot_for(node.bias),
                      slot,
                      scratch_slot_,
                      prepared == b_prepared_slot_.end() ? -1 : prepared->second};
      // The FP8 amax hand-off: this GEMM measures its output for a later FP8 GEMM
      // that reads it as A; it reads its own A's amax only from a producer whose
      // step was built to write it, never on a producer the backend refused.
      for (ValueId consumer = id + 1; consumer < graph_.size(); ++consumer)
        if (amax_handoff(id, consumer, kernels)) slots.amax_out = amax_slot_.at(id);
      if (node.a != kNoValue && writes_amax[static_cast<std::size_t>(node.a)] &&
          amax_handoff(node.a, id, kernels))
        slots.a_amax = amax_slot_.at(node.a);
      std::unique_ptr<Step> step;
      // Each refusal removes one candidate, so this ends: with a step, or with
      // GE2_ERROR_UNSUPPORTED when none is left or the kernel was forced.
      while (!step) {
        try {
          step = backend.make_gemm(problem, slots, selection.kernel, selection.staged, tune);
        } catch (const Error& error) {
          if (error.status() != GE2_ERROR_UNSUPPORTED && error.status() != GE2_ERROR_CUBLAS) throw;
          refuse_and_reselect(selection, problem, options_.policy, error.what());
        }
      }
      // A gated_mul reading only this GEMM: computed in its epilogue where the kernel
      // can, with the unfused steps kept for executions the fused one does not accept.
      if (const ValueId reader = gated_reader(id);
          reader != kNoValue && has_gated_epilogue(selection.kernel)) {
        GemmSlots fused_slots = slots;
        fused_slots.d = slot_for(reader);
        const auto prepared_gated = gated_prepared_slot_.find(id);
        fused_slots.b_prepared =
            prepared_gated == gated_prepared_slot_.end() ? -1 : prepared_gated->second;
        const GemmProblem gated = gated_problem(storage, id, reader);
        std::string refusal = gated_epilogue_problem(gated, selection.kernel);
        std::unique_ptr<Step> fused;
        if (refusal.empty()) {
          try {
            fused = backend.make_gemm(gated, fused_slots, selection.kernel, false, tune);
          } catch (const Error& error) {
            if (error.status() != GE2_ERROR_UNSUPPORTED) throw;
            refusal = error.what();
          }
        }
        if (!fused) {
          note("gated_epilogue",
               [&] { return fmt::format("gated_mul #{} not fused: {}", reader, refusal); });
        } else {
          std::vector<std::unique_ptr<Step>> unfused;
          unfused.push_back(std::move(step));
          unfused.push_back(elementwise_step(reader, false));
          step = std::make_unique<FusedStep>(std::move(fused), std::move(unfused));
          fused_into_gemm[static_cast<std::size_t>(reader)] = true;
          note("gated_epilogue", [&] {
            return fmt::format("gated_mul #{} ({}(gate) * up) computed in the epilogue", reader,
                               activation_name(graph_.node(reader).act));
          });
          note("output", [&] { return storage[static_cast<std::size_t>(reader)].shape_string(); });
        }
      }
      list->steps.push_back(std::move(step));
      kernels[static_cast<std::size_t>(id)] = selection.kernel;
      writes_amax[static_cast<std::size_t>(id)] =
          slots.amax_out >= 0 && is_cublaslt_fp8_kernel(selection.kernel);
      note("problem", [&] { return problem_json(problem); });
      note("selection", [&] { return selection_json(selection); });
    } else {
      list->steps.push_back(elementwise_step(id, true));
    }
    if (describe) {
      step_json["kernel"] = list->steps.back()->describe();
      steps_json->push_back(std::move(step_json));
    }
  }
  return list;
}

bool Plan::amax_handoff(ValueId producer, ValueId consumer,
                        const std::vector<KernelId>& kernels) const {
  const Node& p = graph_.node(producer);
  const Node& c = graph_.node(consumer);
  return p.live && c.live && p.is_gemm_family() && c.is_gemm_family() && c.a == producer &&
         is_cublaslt_fp8_kernel(kernels[static_cast<std::size_t>(producer)]) &&
         is_cublaslt_fp8_kernel(kernels[static_cast<std::size_t>(consumer)]) &&
         activation_info(p.act).cublaslt == LtEpilogue::kNone && amax_slot_.contains(producer);
}

std::vector<std::pair<std::vector<Selection>*, std::int64_t>> Plan::choice_lists() {
  std::vector<std::pair<std::vector<Selection>*, std::int64_t>> lists;
  if (max_extent_ > 0) {
    for (ExtentBucket& bucket : buckets_) lists.emplace_back(&bucket.selections, bucket.last);
  } else {
    lists.emplace_back(&fixed_, 0);
  }
  return lists;
}

const void* Plan::constant_data(ValueId v) const {
  if (v == kNoValue || graph_.node(v).kind != OpKind::Constant) return nullptr;
  return slot_defaults_[static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(v)])];
}

ValueId Plan::gated_reader(ValueId gemm) const {
  const Node& node = graph_.node(gemm);
  auto constant_or_none = [&](ValueId v) {
    return v == kNoValue || graph_.node(v).kind == OpKind::Constant;
  };
  if (!node.live || !node.is_gemm_family() || node.c != kNoValue || node.act != Activation::None ||
      graph_.node(node.b).kind != OpKind::Constant || !constant_or_none(node.bias) ||
      graph_.use_count(gemm) != 1)
    return kNoValue;
  for (ValueId id = gemm + 1; id < graph_.size(); ++id) {
    const Node& reader = graph_.node(id);
    if (reader.live && reader.kind == OpKind::GatedMul && reader.x == gemm) return id;
  }
  return kNoValue;
}

GemmProblem Plan::gated_problem(const std::vector<TensorType>& storage, ValueId gemm,
                                ValueId reader) const {
  GemmProblem problem = gemm_problem(graph_, graph_.node(gemm), storage, gemm);
  problem.gated =
      GatedOutput{graph_.node(reader).act, matrix_view(storage[static_cast<std::size_t>(reader)])};
  return problem;
}

void Plan::prepare_gated_weights() {
  const auto lists = choice_lists();
  for (ValueId id = 0; id < graph_.size(); ++id) {
    const ValueId reader = gated_reader(id);
    if (reader == kNoValue) continue;
    const GemmProblem problem = gated_problem(storage_, id, reader);
    const Node& node = graph_.node(id);
    for (const auto& [selections, extent] : lists) {
      const KernelId kernel = (*selections)[static_cast<std::size_t>(id)].kernel;
      if (!gated_epilogue_problem(problem, kernel).empty()) continue;
      auto prepared = backend_->prepare_gemm_weight(kernel, problem, constant_data(node.b),
                                                    constant_data(node.bias));
      if (prepared) gated_prepared_slot_[id] = add_owned_slot(std::move(prepared));
      break;  // one dtype per node: every gated row reads the same form
    }
  }
}

int Plan::add_slot(void* owned_pointer, bool is_output) {
  slot_defaults_.push_back(owned_pointer);
  io_is_output_.push_back(is_output);
  return static_cast<int>(slot_defaults_.size()) - 1;
}

int Plan::add_owned_slot(std::unique_ptr<Buffer> buffer) {
  const int slot = add_slot(buffer->data(), false);
  owned_.push_back(std::move(buffer));
  return slot;
}

nlohmann::json Plan::apply_fp8_policy() {
  Backend& backend = *backend_;
  const SelectionPolicy& policy = options_.policy;
  const auto lists = choice_lists();
  nlohmann::json layers = nlohmann::json::array();
  std::size_t scratch_bytes = 0;
  std::vector<ValueId> fp8_gemms;  // the GEMMs that keep an FP8 row
  for (ValueId id = 0; id < graph_.size(); ++id) {
    const Node& node = graph_.node(id);
    if (!node.live || !node.is_gemm_family()) continue;
    std::set<KernelId> kept;  // FP8 rows that passed the gate for this GEMM
    // An FP8 row some list chose for this GEMM and the gate has not passed yet.
    auto next_fp8 = [&]() -> std::optional<KernelId> {
      for (const auto& [selections, extent] : lists) {
        const KernelId kernel = (*selections)[static_cast<std::size_t>(id)].kernel;
        if (is_fp8_kernel(kernel) && !kept.contains(kernel)) return kernel;
      }
      return std::nullopt;
    };
    // The gate and the scratch take the problem at the bound: the most rows.
    const GemmProblem problem = gemm_problem(graph_, node, storage_, id);
    std::unique_ptr<Buffer> prepared;  // the constant B's e4m3 copy, made for the first FP8 row
    std::map<KernelId, std::string> refused;  // FP8 rows gated and refused, with the reason
    // Refuses `kernel` in every list that chose it; returns what took its place
    // in the first such list.
    auto refuse = [&](KernelId kernel, const std::string& reason) {
      std::optional<KernelId> replacement;
      for (const auto& [selections, extent] : lists) {
        Selection& selection = (*selections)[static_cast<std::size_t>(id)];
        if (selection.kernel != kernel) continue;
        refuse_and_reselect(selection, gemm_problem(graph_, node, storage_at(storage_, extent), id),
                            policy, reason);
        if (!replacement) replacement = selection.kernel;
      }
      return replacement;
    };
    // Each refusal takes the next candidate, which may be another FP8 row (fast
    // accumulation first, then fp32 accumulation): every row a list runs is gated.
    for (std::optional<KernelId> fp8 = next_fp8(); fp8; fp8 = next_fp8()) {
      if (const auto it = refused.find(*fp8); it != refused.end()) {
        refuse(*fp8, it->second);  // a list that reached a row already judged: no second run
        continue;
      }
      if (const void* b = constant_data(node.b); b && !prepared)
        prepared = backend.prepare_gemm_weight(*fp8, problem, b, constant_data(node.bias));
      const Fp8GateResult gate =
          measure_fp8_error(backend, problem, *fp8, constant_data(node.b), constant_data(node.bias),
                            prepared ? prepared->data() : nullptr, policy);
      const bool passed = gate.worst_channel_error <= policy.fp8_max_error;
      auto number = [](double value) {
        return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json("not finite");
      };
      nlohmann::json layer{{"node", id},
                           {"kernel", kernel_name(*fp8)},
                           {"scales",
                            "per-tensor (amax / 448): weights at compile, activations "
                            "every execution"},
                           {"calibration_rows", gate.rows},
                           {"compared_with", kernel_name(gate.reference)},
                           {"relative_error", number(gate.relative_error)},
                           {"worst_channel_error", number(gate.worst_channel_error)},
                           {"max_error", policy.fp8_max_error}};
      if (passed) {
        layer["decision"] = "kept";
        kept.insert(*fp8);
      } else {
        const std::string refusal = fmt::format(
            "FP8 accuracy gate: relative error {:.4g} in the worst output channel "
            "against {} exceeds max_error {:.4g} (layer {:.4g})",
            gate.worst_channel_error, kernel_name(gate.reference), policy.fp8_max_error,
            gate.relative_error);
        refused[*fp8] = refusal;
        layer["decision"] = fmt::format("fallback to {}", kernel_name(*refuse(*fp8, refusal)));
      }
      layers.push_back(layer);
    }
    if (kept.empty()) continue;
    fp8_gemms.push_back(id);
    for (KernelId row : kept)  // the scratch at the bound: the most rows
      scratch_bytes =
          std::max(scratch_bytes, backend.gemm_scratch_bytes(row, problem, prepared != nullptr));
    if (prepared) b_prepared_slot_[id] = add_owned_slot(std::move(prepared));
  }
  if (scratch_bytes > 0) scratch_slot_ = add_owned_slot(backend.allocate(scratch_bytes));
  // 16 bytes per FP8 GEMM for its output's amax, handed to a next FP8 GEMM (amax_handoff).
  if (!fp8_gemms.empty()) {
    const int block = add_owned_slot(backend.allocate(16 * fp8_gemms.size()));
    auto* base = static_cast<unsigned char*>(slot_defaults_[static_cast<std::size_t>(block)]);
    for (std::size_t i = 0; i < fp8_gemms.size(); ++i)
      amax_slot_[fp8_gemms[i]] = add_slot(base + 16 * i, false);
  }
  return {{"allow_fp8", true},
          {"max_error", policy.fp8_max_error},
          {"calibration", fmt::format("{} rows of N(0, 1) inputs; the plan's constants as "
                                      "they are",
                                      kFp8CalibrationRows)},
          {"scratch_bytes", scratch_bytes},
          {"layers", layers}};
}

void Plan::execute(const ge2_binding_t* bindings, std::size_t count, void* stream) {
  std::lock_guard lock(mutex_);
  run(*full_, bindings, count, stream, "ge2_plan_execute");
}

void Plan::execute_at(std::int64_t extent, const ge2_binding_t* bindings, std::size_t count,
                      void* stream) {
  const char* function = "ge2_plan_execute_dynamic";
  require(max_extent_ > 0, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'plan' has no dynamic extent (its graph has no input from "
          "ge2_graph_add_dynamic_input); run it with ge2_plan_execute",
          function);
  require(extent >= 1 && extent <= max_extent_, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'extent' = {} is outside the plan's [1, {}]", function, extent,
          max_extent_);
  std::lock_guard lock(mutex_);
  run(extent == max_extent_ ? *full_ : steps_at(extent), bindings, count, stream, function);
}

const ExtentBucket& Plan::bucket_of(std::int64_t extent) const {
  const auto it = std::lower_bound(
      buckets_.begin(), buckets_.end(), extent,
      [](const ExtentBucket& bucket, std::int64_t value) { return bucket.last < value; });
  assert(it != buckets_.end() && it->first <= extent);
  return *it;
}

StepList& Plan::steps_at(std::int64_t extent) {
  const auto hit = std::find_if(lists_.begin(), lists_.end(),
                                [&](const auto& list) { return list->extent == extent; });
  if (hit != lists_.end()) {
    std::rotate(hit, hit + 1, lists_.end());  // now the most recently used
    return *lists_.back();
  }
  // Built before anything is evicted, so a failure leaves the kept lists as they were.
  auto list = build_steps(extent, bucket_of(extent).selections, TuneUse::LookupOnly, nullptr);
  if (lists_.size() == kMaxStepLists) lists_.erase(lists_.begin());
  lists_.push_back(std::move(list));
  return *lists_.back();
}

void Plan::run(StepList& list, const ge2_binding_t* bindings, std::size_t count, void* stream,
               const char* function) {
  require(bindings != nullptr || count == 0, GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'bindings' is NULL with num_bindings = {}", function, count);
  // Checked before the array is read: a count larger than the array it
  // describes must not make ge2 read past it.
  require(count <= io_.size(), GE2_ERROR_INVALID_ARGUMENT,
          "{}: argument 'num_bindings' = {} is more than the plan's {} inputs and outputs",
          function, count, io_.size());
  state_.slots = slot_defaults_;
  state_.stream = stream;
  state_.steps_id = list.id;
  std::vector<bool> bound(io_.size(), false);
  for (std::size_t i = 0; i < count; ++i) {
    const ge2_binding_t& binding = bindings[i];
    require(binding.name != nullptr, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'bindings[{}].name' is NULL", function, i);
    std::size_t index = 0;
    while (index < io_.size() && io_[index].name != binding.name) ++index;
    require(index < io_.size(), GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'bindings[{}].name' = '{}' is not an input or output of the plan",
            function, i, binding.name);
    require(!bound[index], GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'bindings[{}].name' = '{}' is bound twice", function, i, binding.name);
    require(binding.data != nullptr, GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'bindings[{}].data' for '{}' is NULL", function, i, binding.name);
    bound[index] = true;
    state_.slots[static_cast<std::size_t>(io_[index].slot)] = binding.data;
  }
  for (std::size_t index = 0; index < io_.size(); ++index) {
    require(bound[index], GE2_ERROR_INVALID_ARGUMENT,
            "{}: argument 'bindings': {} '{}' is not bound", function,
            io_[index].is_output ? "output" : "input", io_[index].name);
  }
  check_outputs_do_not_overlap(list, function);
  backend_->execute(list.steps, state_, list.io_bytes, io_is_output_);
}

// Kernels read inputs while they write outputs (cuBLASLt and the reference loop
// alike), so an output sharing bytes with another binding gives wrong results.
void Plan::check_outputs_do_not_overlap(const StepList& list, const char* function) const {
  auto range_of = [&](const PlanIo& io) {
    const auto slot = static_cast<std::size_t>(io.slot);
    const auto begin = reinterpret_cast<std::uintptr_t>(state_.slots[slot]);
    return std::pair{begin, begin + list.io_bytes[slot]};
  };
  for (const PlanIo& output : io_) {
    if (!output.is_output) continue;
    const auto [begin, end] = range_of(output);
    for (const PlanIo& other : io_) {
      if (&other == &output) continue;
      const auto [other_begin, other_end] = range_of(other);
      require(end <= other_begin || other_end <= begin, GE2_ERROR_INVALID_ARGUMENT,
              "{}: argument 'bindings': output '{}' ({} bytes at {:#x}) overlaps {} '{}' ({} "
              "bytes at {:#x}); an output must not share memory with another binding",
              function, output.name, end - begin, begin, other.is_output ? "output" : "input",
              other.name, other_end - other_begin, other_begin);
    }
  }
}

}  // namespace ge2
