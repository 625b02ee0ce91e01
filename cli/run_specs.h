// What `mxtrain train` and `mxtrain bench train` share: the runs a command names (--runs or
// --precision with its recipe flags), the training configuration its model and loop flags
// describe, and OpenMP's waiting between a step's parallel regions.
#pragma once

#include <string>
#include <vector>

#include "args.h"
#include "mxtrain/comm.h"
#include "mxtrain/recipe.h"
#include "mxtrain/train/train.h"

namespace mxtrain::cli {

struct RunSpec {
  std::string name;
  Recipe recipe;
};

// The runs of --precision (one, with --recipe, --scale, --input-policy, --weight-policy,
// --reuse-weights, --hp-gemms, --hp-precision) or of --runs (default bf16,
// mxfp8-quantized, mxfp8-deferred, mxfp8-auto; --recipe and --scale apply to the mxfp8
// ones). Error on a bad name or a flag that applies to none of them.
std::vector<RunSpec> RunSpecs(const ParsedArgs& args);

// The training configuration of the model flags (--model and the sizes), the loop's
// (--steps, --batch, --micro-batches, --seed, --threads, --checkpoint-every,
// --stop-after, --eval-every, --lr, --warmup) and --expert-parallel, each at its default
// where absent; over `world` (null: one process).
TrainConfig BaseTrainConfig(const ParsedArgs& args, Communicator* world);

// Runs this process again as `mxtrain <command...> <argv...>` with libgomp's waiting set for
// a training loop (OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=20000), unless the user set
// either; returns only when it did not run again (set already, or execv failed).
void ExecWithTrainingWaitPolicy(const std::vector<std::string>& command,
                                const std::vector<std::string>& argv);

}  // namespace mxtrain::cli
