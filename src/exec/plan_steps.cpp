// A plan's step lists: each live node's step on its chosen kernel, a gated GEMM's
// multiply moved into its epilogue where the kernel can, and the plan text of each step.
#include <fmt/format.h>

#include "core/error.hpp"
#include "exec/plan.hpp"

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

}  // namespace

std::unique_ptr<StepList> Plan::build_steps(std::int64_t extent,
                                            const std::vector<Selection>& chosen, TuneUse tune,
                                            nlohmann::json* steps_json) {
  Backend& backend = *backend_;
  auto list = std::make_unique<StepList>();
  list->extent = extent;
  list->id = next_list_id_++;
  list->io_bytes.assign(slot_defaults_.size(), 0);
  list->gemm_kernels.assign(static_cast<std::size_t>(graph_.size()), KernelId::CpuRef);
  for (const PlanIo& io : io_)
    list->io_bytes[static_cast<std::size_t>(io.slot)] = io.type.at_extent(extent).span_bytes();
  const std::vector<TensorType> storage = storage_at(extent);
  auto slot_for = [&](ValueId v) {
    return v == kNoValue ? -1 : slot_of_[static_cast<std::size_t>(v)];
  };
  // gated_mul nodes whose multiply their GEMM's step computes.
  std::vector<bool> fused_into_gemm(static_cast<std::size_t>(graph_.size()), false);
  // By GEMM node: the GEMM its activation is deferred into (deferred_activation_reader).
  std::vector<ValueId> deferred_to(static_cast<std::size_t>(graph_.size()), kNoValue);
  for (ValueId id = 0; id < graph_.size(); ++id)
    deferred_to[static_cast<std::size_t>(id)] = deferred_activation_reader(id, chosen);
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
    const auto [problem, y] = make_elementwise_problem(graph_, id, storage);
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
      GemmProblem problem = make_gemm_problem(graph_, id, storage);
      if (deferred_to[static_cast<std::size_t>(id)] != kNoValue) {
        problem.act = Activation::None;
        note("activation", [&] {
          return fmt::format(
              "{} deferred to the GEMM reading this value (applied as it quantizes "
              "its A)",
              activation_name(node.act));
        });
      }
      // The activation of the GEMM that produced A, when it is deferred into this one.
      const Activation deferred =
          node.a != kNoValue && deferred_to[static_cast<std::size_t>(node.a)] == id
              ? graph_.node(node.a).act
              : Activation::None;
      Selection selection = chosen[static_cast<std::size_t>(id)];
      const auto prepared = b_prepared_slot_.find(id);
      GemmSlots slots{slot_for(node.a),
                      slot_for(node.b),
                      slot_for(node.c),
                      slot_for(node.bias),
                      slot,
                      scratch_slot_,
                      prepared == b_prepared_slot_.end() ? -1 : prepared->second};
      std::unique_ptr<Step> step = build_gemm(problem, slots, selection, deferred, tune);
      list->gemm_kernels[static_cast<std::size_t>(id)] = selection.kernel;
      if (deferred != Activation::None && !quantizes_a(selection.kernel)) {
        // The FP8 row that was to apply it was refused here: A is activated in
        // place first (the pass its producer would have run).
        ElementwiseProblem pass;
        pass.x = pass.out = storage[static_cast<std::size_t>(node.a)];
        pass.act = deferred;
        list->steps.push_back(
            backend.make_elementwise(pass, {slot_for(node.a), -1, slot_for(node.a), -1}));
        note("input_activation", [&] {
          return fmt::format(
              "{} of A (deferred by its producer) run as its own pass: {} was "
              "refused",
              activation_name(deferred), kernel_name(chosen[static_cast<std::size_t>(id)].kernel));
        });
      } else if (deferred != Activation::None) {
        note("input_activation", [&] {
          return fmt::format(
              "{} of A, deferred from the GEMM that produced it, applied by the "
              "e4m3 quantization",
              activation_name(deferred));
        });
      }
      // A gated_mul reading only this GEMM: computed in its epilogue where the kernel
      // can, with the unfused steps kept for executions the fused one does not accept.
      if (const ValueId reader = gated_reader(id);
          reader != kNoValue && has_gated_epilogue(selection.kernel)) {
        GemmSlots fused_slots = slots;
        fused_slots.d = slot_for(reader);
        // Not a structured binding: the plan-text lambdas capture them (clang 14).
        auto gated = build_gated(storage, id, reader, fused_slots, selection.kernel, tune);
        std::unique_ptr<Step> fused = std::move(gated.first);
        const std::string refusal = std::move(gated.second);
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

std::pair<std::unique_ptr<Step>, std::string> Plan::build_gated(
    const std::vector<TensorType>& storage, ValueId gemm, ValueId reader, GemmSlots slots,
    KernelId kernel, TuneUse tune) {
  const auto prepared = gated_prepared_slot_.find(gemm);
  slots.b_prepared = prepared == gated_prepared_slot_.end() ? -1 : prepared->second;
  const GemmProblem gated = gated_problem(storage, gemm, reader);
  if (std::string refusal = gated_epilogue_problem(gated, kernel); !refusal.empty())
    return {nullptr, refusal};
  try {
    return {backend_->make_gemm(gated, slots, kernel, false, tune), ""};
  } catch (const Error& error) {
    if (error.status() != GE2_ERROR_UNSUPPORTED) throw;
    return {nullptr, error.what()};
  }
}

std::unique_ptr<Step> Plan::build_gemm(const GemmProblem& problem, const GemmSlots& slots,
                                       Selection& selection, Activation deferred, TuneUse tune) {
  // Each refusal removes one candidate, so this ends: with a step, or with
  // GE2_ERROR_UNSUPPORTED when none is left or the kernel was forced.
  while (true) {
    try {
      GemmProblem attempt = problem;
      if (quantizes_a(selection.kernel)) attempt.a_act = deferred;
      return backend_->make_gemm(attempt, slots, selection.kernel, selection.staged, tune);
    } catch (const Error& error) {
      if (error.status() != GE2_ERROR_UNSUPPORTED && error.status() != GE2_ERROR_CUBLAS) throw;
      refuse_and_reselect(selection, problem, options_.policy, error.what());
    }
  }
}

ValueId Plan::deferred_activation_reader(ValueId gemm, const std::vector<Selection>& chosen) const {
  const Node& node = graph_.node(gemm);
  if (!node.live || !node.is_gemm_family() || graph_.use_count(gemm) != 1) return kNoValue;
  const Selection& own = chosen[static_cast<std::size_t>(gemm)];
  if (own.staged || !runs_separate_activation_pass(own.kernel, node.act)) return kNoValue;
  for (ValueId id = gemm + 1; id < graph_.size(); ++id) {
    const Node& reader = graph_.node(id);
    if (!reader.live || !reader.is_gemm_family()) continue;
    if (reader.a == gemm && reader.b != gemm && reader.c != gemm && reader.bias != gemm &&
        quantizes_a(chosen[static_cast<std::size_t>(id)].kernel))
      return id;
    if (reader.a == gemm || reader.b == gemm || reader.c == gemm || reader.bias == gemm)
      return kNoValue;
  }
  return kNoValue;
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
  GemmProblem problem = make_gemm_problem(graph_, gemm, storage);
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
                                                    constant_data(node.bias), nullptr);
      if (prepared) gated_prepared_slot_[id] = add_owned_slot(std::move(prepared));
      break;  // one dtype per node: every gated row reads the same form
    }
  }
}

}  // namespace ge2
