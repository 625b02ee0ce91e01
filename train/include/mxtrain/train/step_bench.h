// The training-step benchmark (`mxtrain bench train`; docs/benchmarks.md "Training steps
// side by side"): several runs of the training loop (TrainConfig: the same model and seed,
// other recipes), each with its own model and optimizer, stepped in turn, one optimizer
// step of each per round, the order rotated every round. Each run's steps are then timed in
// the same moments of a shared machine as the first run's (the baseline: bf16 for the
// default runs of `mxtrain train`), whose step times alone wander by more than the
// recipes differ. The steps are the training loop's own (Train): the same batches, losses
// and updates as `mxtrain train` makes with steps = warmup + rounds.
#pragma once

#include <string>
#include <vector>

#include "mxtrain/train/data.h"
#include "mxtrain/train/train.h"

namespace mxtrain {

struct StepBenchResult {
  std::string name;
  double step_ms = 0;      // median over the timed rounds
  double min_step_ms = 0;  // fastest timed round
  // Median over the timed rounds of this run's step time over the first run's in the same
  // round (1 for the first run).
  double ratio = 0;
  // Every step made, warm-up rounds included: losses, gradient norm, learning rate and
  // step time, as Train reports them.
  std::vector<StepMetrics> steps;
};

// Steps `runs` (one process each, no checkpoints or resumes; every run Train accepts) for
// `warmup` untimed rounds and then `rounds` timed ones. Throws Error on a bad run or count.
std::vector<StepBenchResult> RunStepBench(const std::vector<TrainConfig>& runs,
                                          const Corpus& corpus, int64_t warmup, int64_t rounds);

// One JSON line per run: name, step time (median, min), the ratio to the first run and the
// rounds.
std::string ToJson(const std::vector<StepBenchResult>& results, size_t i, int64_t rounds);

}  // namespace mxtrain
