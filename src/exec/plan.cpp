#include "exec/plan.hpp"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <utility>

#include "core/checked_math.hpp"
#include "core/error.hpp"
#include "passes/pass.hpp"
#include "tunedb/tune_record.hpp"

namespace ge2 {
namespace {

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
      plan->buckets_.push_back({first, last, plan->select_gemms(plan->storage_at(last), measured)});
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
  // The FP8 rows the selections chose (any under allow_fp8; without it only the
  // weight-only row on a weight given in e4m3): their weights' copies, and the gate.
  if (nlohmann::json fp8 = plan->apply_fp8_policy();
      describe && (options.policy.allow_fp8 || !fp8["layers"].empty()))
    description["fp8"] = std::move(fp8);
  // The e4m3 copies are made: the plan keeps the backend's copies only (the
  // scales stay, which make_gemm_problem reads).
  for (ValueId id = 0; id < plan->graph_.size(); ++id) {
    Node& node = plan->graph_.node(id);
    if (const QuantizedData* given = node.quantized.get())
      node.quantized = std::make_shared<QuantizedData>(QuantizedData{given->storage,
                                                                     given->rows,
                                                                     given->cols,
                                                                     {},
                                                                     given->scales,
                                                                     given->block_rows,
                                                                     given->block_cols});
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
  const std::size_t released =
      plan->release_unread_constants(describe ? &description["constants"] : nullptr);
  if (describe) {
    description["constant_bytes"] = owned.constants - released;
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
      if (constants_json) {
        nlohmann::json entry{{"name", node.input_name},
                             {"node", id},
                             {"type", type.shape_string()},
                             {"bytes", bytes}};
        if (const QuantizedData* q = node.quantized.get())
          entry["given_as"] = fmt::format(
              "{} with {} (the FP8 rows read these bytes; other kernels the value above)",
              dtype_name(q->storage), q->scales_text());
        constants_json->push_back(entry);
      }
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
                                                    : make_gemm_problem(graph_, id, types));
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

std::vector<std::pair<std::vector<Selection>*, std::int64_t>> Plan::choice_lists() {
  std::vector<std::pair<std::vector<Selection>*, std::int64_t>> lists;
  if (max_extent_ > 0) {
    for (ExtentBucket& bucket : buckets_) lists.emplace_back(&bucket.selections, bucket.last);
  } else {
    lists.emplace_back(&fixed_, 0);
  }
  return lists;
}

std::vector<TensorType> Plan::storage_at(std::int64_t extent) const {
  std::vector<TensorType> types;
  types.reserve(storage_.size());
  for (const TensorType& type : storage_) types.push_back(type.at_extent(extent));
  return types;
}

std::size_t Plan::release_unread_constants(nlohmann::json* constants_json) {
  if (max_extent_ > 0 || options_.policy.allow_fp8) return 0;  // buckets, the gate read it
  std::size_t released = 0;
  for (ValueId id = 0; id < graph_.size(); ++id) {
    const Node& node = graph_.node(id);
    if (!node.live || node.kind != OpKind::Constant || !node.quantized) continue;
    bool read = false;
    for (ValueId r = 0; r < graph_.size() && !read; ++r) {
      const Node& reader = graph_.node(r);
      if (!reader.live) continue;
      const std::vector<ValueId> operands = reader.operands();
      const auto uses = std::count(operands.begin(), operands.end(), id);
      read =
          uses > 0 &&
          !(uses == 1 && reader.is_gemm_family() && reader.b == id &&
            b_prepared_slot_.contains(r) &&
            backend_->reads_prepared_weight_only(full_->gemm_kernels[static_cast<std::size_t>(r)]));
    }
    if (read) continue;
    const int slot = slot_of_[static_cast<std::size_t>(id)];
    void* const data = slot_defaults_[static_cast<std::size_t>(slot)];
    const auto owner = std::find_if(owned_.begin(), owned_.end(), [&](const auto& buffer) {
      return buffer && buffer->data() == data;
    });
    assert(owner != owned_.end());
    owner->reset();
    slot_defaults_[static_cast<std::size_t>(slot)] = nullptr;
    const std::size_t bytes = storage_[static_cast<std::size_t>(id)].span_bytes();
    released += bytes;
    if (constants_json)
      for (auto& entry : *constants_json)
        if (entry.at("node") == id)
          entry["released"] = fmt::format(
              "{} bytes: its readers read only its e4m3 copy, so the 16-bit value is not kept",
              bytes);
  }
  return released;
}

const void* Plan::constant_data(ValueId v) const {
  if (v == kNoValue || graph_.node(v).kind != OpKind::Constant) return nullptr;
  return slot_defaults_[static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(v)])];
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
  // Kept between executions: binding a plan allocates nothing on the host.
  std::vector<char>& bound = io_bound_;
  bound.assign(io_.size(), 0);
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
    bound[index] = 1;
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
