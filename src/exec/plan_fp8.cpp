// FP8 rows in a plan: under allow_fp8 the accuracy gate on each GEMM an FP8 kernel
// was chosen for and the fallback of those it refuses; the e4m3 weight copies the
// rows read, made from a weight given in e4m3 as given (no gate without allow_fp8:
// docs/fp8.md).
#include <cassert>
#include <cmath>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "exec/fp8_gate.hpp"
#include "exec/plan.hpp"

namespace ge2 {

nlohmann::json Plan::apply_fp8_policy() {
  Backend& backend = *backend_;
  const SelectionPolicy& policy = options_.policy;
  const auto lists = choice_lists();
  nlohmann::json layers = nlohmann::json::array();
  std::size_t scratch_bytes = 0;
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
    const GemmProblem problem = make_gemm_problem(graph_, id, storage_);
    const QuantizedData* given = problem.b_e4m3 ? graph_.node(node.b).quantized.get() : nullptr;
    std::unique_ptr<Buffer> prepared;  // the constant B's e4m3 copy, made for the first FP8 row
    std::map<KernelId, std::string> refused;  // FP8 rows gated and refused, with the reason
    // Refuses `kernel` in every list that chose it; returns what took its place
    // in the first such list.
    auto refuse = [&](KernelId kernel, const std::string& reason) {
      std::optional<KernelId> replacement;
      for (const auto& [selections, extent] : lists) {
        Selection& selection = (*selections)[static_cast<std::size_t>(id)];
        if (selection.kernel != kernel) continue;
        refuse_and_reselect(selection, make_gemm_problem(graph_, id, storage_at(extent)), policy,
                            reason);
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
        prepared = backend.prepare_gemm_weight(*fp8, problem, b, constant_data(node.bias), given);
      const std::string scales =
          given ? fmt::format("given with the weight in e4m3 ({} of the weight as stored)",
                              given->scales_text())
                : "per output channel of the weight (amax / 448) at compile";
      const std::string a_scales =
          kernel_info(*fp8).fp8_weight_only ? "; the activation stays 16-bit"
          : fp8_block_scaled(problem)
              ? fmt::format(
                    "; per row and {} columns of the activation (amax / 448) every "
                    "execution",
                    kFp8ScaleBlock)
              : "; per row of the activation (amax / 448) every execution";
      if (!policy.allow_fp8) {
        // Only the weight-only row on a weight given in e4m3 gets here
        // (dtype_rule): it reads the graph's own numbers, so nothing is gated.
        assert(given && kernel_info(*fp8).fp8_weight_only);
        layers.push_back({{"node", id},
                          {"kernel", kernel_name(*fp8)},
                          {"scales", scales + a_scales},
                          {"decision",
                           "kept: the weight is given in e4m3 and read as given "
                           "(allow_fp8 = 0: no accuracy gate)"}});
        kept.insert(*fp8);
        continue;
      }
      const Fp8GateResult gate =
          measure_fp8_error(backend, problem, *fp8, constant_data(node.b), constant_data(node.bias),
                            prepared ? prepared->data() : nullptr, policy);
      const bool measured = gate.unsupported.empty();  // else the backend could not build it
      const bool passed = measured && gate.worst_channel_error <= policy.fp8_max_error;
      auto number = [&](double value) {
        if (!measured) return nlohmann::json("not measured");
        return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json("not finite");
      };
      nlohmann::json layer{{"node", id},
                           {"kernel", kernel_name(*fp8)},
                           {"scales", scales + a_scales},
                           {"calibration_rows", gate.rows},
                           {"compared_with", kernel_name(gate.reference)},
                           {"relative_error", number(gate.relative_error)},
                           {"worst_channel_error", number(gate.worst_channel_error)},
                           {"max_error", policy.fp8_max_error}};
      if (passed) {
        layer["decision"] = "kept";
        kept.insert(*fp8);
      } else {
        std::string refusal;
        if (measured) {
          refusal = fmt::format(
              "FP8 accuracy gate: relative error {:.4g} in the worst output channel against {} "
              "exceeds max_error {:.4g} (layer {:.4g})",
              gate.worst_channel_error, kernel_name(gate.reference), policy.fp8_max_error,
              gate.relative_error);
        } else {
          refusal = fmt::format(
              "FP8 accuracy gate: the backend cannot run it on the calibration problem ({})",
              gate.unsupported);
          layer["unsupported"] = gate.unsupported;
        }
        refused[*fp8] = refusal;
        layer["decision"] = fmt::format("fallback to {}", kernel_name(*refuse(*fp8, refusal)));
      }
      layers.push_back(layer);
    }
    if (kept.empty()) continue;
    for (KernelId row : kept)  // the scratch at the bound: the most rows
      scratch_bytes =
          std::max(scratch_bytes, backend.gemm_scratch_bytes(row, problem, prepared != nullptr));
    if (prepared) b_prepared_slot_[id] = add_owned_slot(std::move(prepared));
  }
  if (scratch_bytes > 0) scratch_slot_ = add_owned_slot(backend.allocate(scratch_bytes));
  nlohmann::json description{
      {"allow_fp8", policy.allow_fp8}, {"scratch_bytes", scratch_bytes}, {"layers", layers}};
  if (policy.allow_fp8) {
    description["max_error"] = policy.fp8_max_error;
    description["calibration"] = fmt::format(
        "{} rows of N(0, 1) inputs; the plan's constants as they are", kFp8CalibrationRows);
  }
  return description;
}

}  // namespace ge2
