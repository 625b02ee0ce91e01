// The training-step benchmark's report (step_bench.h); RunStepBench is in train.cc, beside
// the training loop whose steps it makes.
#include "mxtrain/train/step_bench.h"

#include "io/json_util.h"

namespace mxtrain {

std::string ToJson(const std::vector<StepBenchResult>& results, size_t i, int64_t rounds) {
  using internal::Json;
  const StepBenchResult& r = results.at(i);
  Json o = Json::object();
  o["bench"] = "train";
  o["run"] = r.name;
  o["baseline"] = results.front().name;
  o["step_ms"] = r.step_ms;
  o["min_step_ms"] = r.min_step_ms;
  o["ratio"] = r.ratio;
  o["rounds"] = rounds;
  return internal::DumpJson(o, -1);
}

}  // namespace mxtrain
