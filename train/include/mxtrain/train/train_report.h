// Reports of training runs (train.h): the comparison table `mxtrain train` prints,
// summary.json, the SVG plot of loss and memory per run, and the run directory's files.
#pragma once

#include <string>
#include <vector>

#include "mxtrain/train/train.h"

namespace mxtrain {

// A JSON list, one object per run: name, precision, input_policy, weight_policy (null for
// fp32 / bf16), final_train_loss, final_val_loss, tokens_per_s, step_ms, peak_bytes,
// saved_bytes, plus recipe, steps, parameters, cache hits and misses and seconds.
std::string SummaryJson(const std::vector<TrainResult>& runs);

// The side-by-side table: one row per run with its final train and validation loss, the
// validation loss's relative gap to the bf16 run (when there is one), tokens/s, median step
// time, peak memory and saved-for-backward bytes.
std::string ComparisonTable(const std::vector<TrainResult>& runs);

// An SVG with the training and validation loss curves of every run, and its peak and
// saved-for-backward bytes per step.
std::string TrainingPlotSvg(const std::vector<TrainResult>& runs);

// Writes bytes to path through a temporary file and a rename; throws Error naming the path.
void WriteFileAtomic(const std::string& path, const std::string& bytes);

}  // namespace mxtrain

namespace mxtrain {

// A new directory under `base` named <UTC date-time>-<n> with the lowest n >= 1 not yet
// taken (base is created if needed); returns its path.
std::string MakeRunDirectory(const std::string& base);
// dir/<run name>/ (created if needed) and its checkpoint path,
// dir/<run name>/checkpoint.safetensors.
std::string RunSubdirectory(const std::string& dir, const std::string& run_name);
// A run over several processes keeps one checkpoint per rank:
// dir/<run name>/checkpoint.rank<r>-of-<world>.safetensors.
std::string CheckpointPath(const std::string& dir, const std::string& run_name, int rank = 0,
                           int world_size = 1);
// dir/<run name>/metrics.csv.
void WriteRunMetrics(const std::string& dir, const TrainResult& run);
// dir/summary.json and dir/plot.svg.
void WriteJobSummary(const std::string& dir, const std::vector<TrainResult>& runs);

}  // namespace mxtrain
