// The expert-parallel benchmark (`mpirun -np 2 mxtrain bench ep`; docs/benchmarks.md
// "Training on several processes"): one training configuration over the job's W ranks in
// three layouts, in one run: the experts replicated on every rank (expert parallelism 1,
// plain data parallelism, no exchange: the baseline), and sharded over the W ranks with
// the bf16 and with the MXFP8 wire. Per layout: the median step time and, per exchange, the
// bytes a step sends between ranks. Collective over `world`.
#pragma once

#include <string>
#include <vector>

#include "mxtrain/comm.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/train.h"

namespace mxtrain {

struct EpBenchResult {
  std::string layout;  // "ep1" | "ep<W>-bf16" | "ep<W>-mxfp8"
  int64_t world_size = 1;
  int64_t expert_parallel = 1;
  ExpertWire wire = ExpertWire::kLocal;
  double step_ms = 0;  // median over the steps
  double tokens_per_s = 0;
  ExpertWireBytes wire_per_step;  // every rank's together
  int64_t grad_sum_bytes_per_step = 0;
  double final_val_loss = 0;
};

// Runs `base` (its model, recipe, steps; an MXFP8 recipe) in the three layouts; base.world
// is the job (W >= 2, dividing the experts).
std::vector<EpBenchResult> RunEpBench(const TrainConfig& base, const Corpus& corpus);

// One JSON line per layout, with the ratios to the baseline (step time) and to the bf16
// wire (bytes) measured in the same run.
std::string ToJson(const std::vector<EpBenchResult>& results, size_t i);
// The table of the README section "Training on several processes".
std::string EpBenchTable(const std::vector<EpBenchResult>& results);

}  // namespace mxtrain
