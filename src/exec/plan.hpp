// A compiled plan: steps with their kernels, the buffers it owns, and its text.
// A plan with a dynamic extent keeps one step list per extent it ran at, built
// on first use from kernels chosen once per bucket of extents at compile time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "exec/backend.hpp"
#include "ir/graph.hpp"

namespace ge2 {

struct CompileOptions {
  bool fuse = true;
  bool graph_replay = false;  // CUDA: replay a recorded CUDA graph while the bindings repeat
  // Build the plan text (Plan::description). One-shot plans are never shown, and
  // their text costs more host time than their compile without it.
  bool describe = true;
  SelectionPolicy policy;
};

struct PlanIo {
  std::string name;
  bool is_output = false;
  TensorType type;  // with the strides the bound memory has; a dynamic one at the bound
  int slot = -1;
};

// The steps that run the plan at one extent (a fixed plan has one list).
struct StepList {
  std::int64_t extent = 0;
  std::uint64_t id = 0;  // ExecState::steps_id while it runs
  std::vector<std::unique_ptr<Step>> steps;
  std::vector<std::size_t> io_bytes;   // per slot: bytes a binding spans, 0 for plan-owned
  std::vector<KernelId> gemm_kernels;  // by node id: the kernel each GEMM's step runs
};

// Extents first..last share the kernel of each GEMM node chosen at `last`.
struct ExtentBucket {
  std::int64_t first = 0, last = 0;
  std::vector<Selection> selections;  // by node id; GEMM nodes only
};

class Plan {
 public:
  explicit Plan(std::shared_ptr<Backend> backend) : backend_(std::move(backend)) {}

  const std::vector<PlanIo>& io() const { return io_; }
  // The plan text; empty when compiled without `describe`.
  const std::string& description() const { return description_; }
  // The bound of the dynamic extent; 0 for a plan of fixed shapes.
  std::int64_t max_extent() const { return max_extent_; }
  // Every GEMM problem the selector chose a kernel for (one per GEMM node, per
  // bucket of a dynamic plan): what a tuning run would have to measure.
  const std::vector<GemmProblem>& selected_problems() const { return selected_problems_; }
  // Runs at the bound (a dynamic plan) or the fixed shapes.
  void execute(const ge2_binding_t* bindings, std::size_t count, void* stream);
  // Runs a dynamic plan at `extent` (1..max_extent()).
  void execute_at(std::int64_t extent, const ge2_binding_t* bindings, std::size_t count,
                  void* stream);

  // Step lists of extents other than the bound kept for reuse, least recently used evicted.
  static constexpr std::size_t kMaxStepLists = 128;

 private:
  void run(StepList& list, const ge2_binding_t* bindings, std::size_t count, void* stream,
           const char* function);
  void check_outputs_do_not_overlap(const StepList& list, const char* function) const;
  StepList& steps_at(std::int64_t extent);
  const ExtentBucket& bucket_of(std::int64_t extent) const;
  // compile_plan's stages, in order. The layout of every value (storage_, slot_of_)
  // and a slot per input and output.
  void lay_out_io(const Graph& graph);
  // Checks that the constants and intermediates fit together, then allocates them
  // and uploads the constants (their host copies are dropped); `constants_json`,
  // when not null, receives each constant's text.
  struct OwnedBytes {
    std::size_t intermediates = 0, constants = 0;
  };
  OwnedBytes allocate_owned(Graph& graph, nlohmann::json* constants_json);
  // Each live GEMM's kernel (by node id) for the layouts `types`: `measured` times
  // (the backend's, from its tuning database) where they exist, else the cost model.
  std::vector<Selection> select_gemms(const std::vector<TensorType>& types,
                                      const MeasuredTime& measured);
  // The plan text's dynamic.buckets: each bucket's kernels.
  nlohmann::json buckets_text() const;
  // `chosen`: the GEMM selections to build, by node id (a bucket's or the fixed plan's).
  // `steps_json`: receives each step's text when not null.
  std::unique_ptr<StepList> build_steps(std::int64_t extent, const std::vector<Selection>& chosen,
                                        TuneUse tune, nlohmann::json* steps_json);
  // A fixed plan without allow_fp8 releases the backend copy of each quantized constant
  // whose every reader is a GEMM reading it as B on a kernel that reads only its
  // prepared e4m3 copy (Backend::reads_prepared_weight_only): nothing reads the 16-bit
  // value then. Returns the bytes released; `constants_json` marks them.
  std::size_t release_unread_constants(nlohmann::json* constants_json);
  // Prepares the constant weights of GEMMs an FP8 kernel was chosen for (from the
  // given e4m3 bytes where there are some), under allow_fp8 runs each through the
  // accuracy gate (fp8_gate.hpp), keeps it or falls back, and allocates the scratch
  // the kept ones share. Returns the plan text (no layers: no FP8 row was chosen).
  nlohmann::json apply_fp8_policy();
  // Every list of GEMM choices (the buckets', or the fixed plan's) with the extent
  // its problems are taken at.
  std::vector<std::pair<std::vector<Selection>*, std::int64_t>> choice_lists();
  // Every value's layout at `extent`: dynamic values get it as their leading dimension.
  std::vector<TensorType> storage_at(std::int64_t extent) const;
  // The backend copy of constant `v`; nullptr for kNoValue or a value that is no constant.
  const void* constant_data(ValueId v) const;
  // The step of GEMM `gemm` on `kernel` with its only reader, gated_mul `reader`,
  // computed in the epilogue (`slots`' d: the reader's slot), or nullptr and why not.
  std::pair<std::unique_ptr<Step>, std::string> build_gated(const std::vector<TensorType>& storage,
                                                            ValueId gemm, ValueId reader,
                                                            GemmSlots slots, KernelId kernel,
                                                            TuneUse tune);
  // The step of a GEMM on `selection`'s kernel, or on the next candidate each
  // time the backend refuses one (`selection` then says so); `deferred`: the
  // activation of the GEMM that produced A, which an FP8 row that quantizes A
  // applies (quantizes_a, GemmProblem::a_act) and any other kernel leaves to the caller.
  std::unique_ptr<Step> build_gemm(const GemmProblem& problem, const GemmSlots& slots,
                                   Selection& selection, Activation deferred, TuneUse tune);
  // The GEMM that is the only reader of GEMM `gemm`, reading it as A, when it runs
  // on an FP8 row that quantizes A (quantizes_a) in `chosen` and `gemm`'s kernel in `chosen` runs
  // its activation as a separate pass over its result (runs_separate_activation_pass: cuBLASLt and
  // erf GELU): that row's quantization pass, which reads A anyway, applies the activation
  // (GemmProblem::a_act) and `gemm` leaves it out. The stored intermediate is then the
  // pre-activation, which nothing else reads, and the FP8 GEMM sees the very values the pass would
  // have stored. Else kNoValue.
  ValueId deferred_activation_reader(ValueId gemm, const std::vector<Selection>& chosen) const;
  // The gated_mul that is the only reader of GEMM `gemm`, when the GEMM could
  // compute it in its epilogue (no C, no activation of its own, constant B and
  // bias); else kNoValue.
  ValueId gated_reader(ValueId gemm) const;
  // GEMM `gemm`'s problem with `reader`'s multiply in its epilogue.
  GemmProblem gated_problem(const std::vector<TensorType>& storage, ValueId gemm,
                            ValueId reader) const;
  // The weights of gated GEMMs some list runs on a kernel with a gated epilogue,
  // in the form that kernel reads (gated_prepared_slot_).
  void prepare_gated_weights();
  // A new slot whose default pointer is `owned_pointer` (nullptr: the caller binds it).
  int add_slot(void* owned_pointer, bool is_output);
  // A new slot for `buffer`, which the plan keeps.
  int add_owned_slot(std::unique_ptr<Buffer> buffer);

  friend std::unique_ptr<Plan> compile_plan(std::shared_ptr<Backend> backend, Graph graph,
                                            const CompileOptions& options);
  std::shared_ptr<Backend> backend_;  // shared so a plan outlives its context safely
  CompileOptions options_;
  Graph graph_;                      // after the passes; constants' bytes live in owned_
  std::vector<TensorType> storage_;  // memory layout of every value, at the bound
  std::vector<int> slot_of_;         // by value id; -1 for dead values
  std::vector<PlanIo> io_;
  std::vector<std::unique_ptr<Buffer>> owned_;
  std::vector<void*> slot_defaults_;  // owned buffers; nullptr where the caller binds
  std::vector<bool> io_is_output_;
  std::int64_t max_extent_ = 0;
  std::vector<ExtentBucket> buckets_;
  std::vector<Selection> fixed_;  // by node id: a fixed-shape plan's choices
  std::vector<GemmProblem> selected_problems_;
  std::map<ValueId, int> b_prepared_slot_;        // GEMM node -> its B in its FP8 kernel's form
  std::map<ValueId, int> gated_prepared_slot_;    // GEMM node -> B and bias for its gated epilogue
  int scratch_slot_ = -1;                         // shared by the steps that asked for scratch
  std::unique_ptr<StepList> full_;                // at the bound, or the fixed shapes
  std::vector<std::unique_ptr<StepList>> lists_;  // other extents, least recently used first
  std::uint64_t next_list_id_ = 1;
  std::string description_;
  std::mutex mutex_;
  ExecState state_;             // reused between executions (guarded by mutex_)
  std::vector<char> io_bound_;  // which inputs and outputs an execution bound (guarded by mutex_)
};

// Runs the passes on (a copy of) the graph, selects kernels and builds the plan.
std::unique_ptr<Plan> compile_plan(std::shared_ptr<Backend> backend, Graph graph,
                                   const CompileOptions& options);

}  // namespace ge2
