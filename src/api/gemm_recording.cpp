// $GE2_TUNE_RECORD: the GEMM problems compiled plans posed, appended for
// `ge_tune tune --from-recorded` (docs/tunedb.md, "Recording a workload").
#include <mutex>
#include <string>
#include <vector>

#include "api/api_objects.hpp"
#include "core/error.hpp"
#include "tunedb/gemm_record.hpp"

namespace ge2 {

void record_selected_gemms(ge2_context_s& context, const Plan& plan) {
  std::string path;
  {
    std::lock_guard lock(context.mutex);
    path = context.gemm_record_path;
  }
  if (path.empty() || plan.selected_problems().empty()) return;
  std::vector<RecordedGemm> records;
  for (const GemmProblem& problem : plan.selected_problems()) records.push_back(record_of(problem));
  try {
    append_gemm_records(path, records);
  } catch (const Error& error) {
    std::lock_guard lock(context.mutex);
    if (context.gemm_record_path.empty()) return;  // another thread reported it
    context.gemm_record_path.clear();
    context.logger(LogLevel::Warning, "$GE2_TUNE_RECORD: {}; this context records no more",
                   error.what());
  }
}

}  // namespace ge2
