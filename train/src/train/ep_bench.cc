// The expert-parallel benchmark (ep_bench.h).
#include "mxtrain/train/ep_bench.h"

#include <cstdio>

#include "io/json_util.h"
#include "mxtrain/error.h"

namespace mxtrain {

std::vector<EpBenchResult> RunEpBench(const TrainConfig& base, const Corpus& corpus) {
  const int w = base.world != nullptr ? base.world->size() : 1;
  MXTRAIN_CHECK(w >= 2,
                "bench ep: needs several processes (mpirun -np 2 mxtrain bench ep), this "
                "job has ",
                w);
  MXTRAIN_CHECK(base.recipe.mxfp8(), "bench ep: needs an MXFP8 recipe");
  struct Layout {
    std::string name;
    int64_t ep;
    ExpertWire wire;
  };
  const std::vector<Layout> layouts = {{"ep1", 1, ExpertWire::kLocal},
                                       {StrCat("ep", w, "-bf16"), w, ExpertWire::kHighPrecision},
                                       {StrCat("ep", w, "-mxfp8"), w, ExpertWire::kMxfp8}};
  std::vector<EpBenchResult> out;
  for (const Layout& l : layouts) {
    TrainConfig c = base;
    c.name = l.name;
    c.expert_parallel = l.ep;
    c.wire = l.wire;
    c.checkpoint_path.clear();
    c.on_step = nullptr;
    const TrainResult r = Train(c, corpus);
    EpBenchResult e;
    e.layout = l.name;
    e.world_size = r.world_size;
    e.expert_parallel = r.expert_parallel;
    e.wire = r.wire;
    e.step_ms = r.step_ms;
    e.tokens_per_s = r.tokens_per_s;
    e.wire_per_step = r.wire_per_step;
    e.grad_sum_bytes_per_step = r.grad_sum_bytes_per_step;
    e.final_val_loss = r.final_val_loss;
    out.push_back(e);
  }
  return out;
}

namespace {

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

const EpBenchResult* Find(const std::vector<EpBenchResult>& results, ExpertWire wire) {
  for (const EpBenchResult& r : results) {
    if (r.wire == wire) return &r;
  }
  return nullptr;
}

}  // namespace

std::string ToJson(const std::vector<EpBenchResult>& results, size_t i) {
  using internal::Json;
  const EpBenchResult& r = results.at(i);
  const EpBenchResult* base = Find(results, ExpertWire::kLocal);
  const EpBenchResult* bf16 = Find(results, ExpertWire::kHighPrecision);
  const ExpertWireBytes& b = r.wire_per_step;
  Json o = Json::object();
  o["bench"] = "ep";
  o["layout"] = r.layout;
  o["world_size"] = r.world_size;
  o["expert_parallel"] = r.expert_parallel;
  o["wire"] = Name(r.wire);
  o["step_ms"] = r.step_ms;
  o["tokens_per_s"] = r.tokens_per_s;
  o["wire_bytes_per_step"] = b.remote();
  o["dispatch_forward_bytes"] = b.dispatch_forward;
  o["combine_forward_bytes"] = b.combine_forward;
  o["combine_backward_bytes"] = b.combine_backward;
  o["dispatch_backward_bytes"] = b.dispatch_backward;
  o["grad_sum_bytes_per_step"] = r.grad_sum_bytes_per_step;
  o["final_val_loss"] = r.final_val_loss;
  o["step_ms_vs_ep1"] = base != nullptr ? Ratio(r.step_ms, base->step_ms) : 0.0;
  if (bf16 != nullptr && r.wire != ExpertWire::kLocal) {
    const ExpertWireBytes& h = bf16->wire_per_step;
    o["bytes_vs_bf16_wire"] =
        Ratio(static_cast<double>(b.remote()), static_cast<double>(h.remote()));
    o["dispatch_forward_vs_bf16_wire"] =
        Ratio(static_cast<double>(b.dispatch_forward), static_cast<double>(h.dispatch_forward));
    o["combine_backward_vs_bf16_wire"] =
        Ratio(static_cast<double>(b.combine_backward), static_cast<double>(h.combine_backward));
    o["step_ms_vs_bf16_wire"] = Ratio(r.step_ms, bf16->step_ms);
  }
  return internal::DumpJson(o, -1);
}

std::string EpBenchTable(const std::vector<EpBenchResult>& results) {
  const EpBenchResult* base = Find(results, ExpertWire::kLocal);
  const EpBenchResult* bf16 = Find(results, ExpertWire::kHighPrecision);
  std::string t =
      "| layout | step (ms) | vs ep1 | tokens MB/step | dispatch fwd MB | combine bwd MB | "
      "token bytes vs bf16 wire | gradient sums MB/step |\n|---|---|---|---|---|---|---|---|\n";
  for (const EpBenchResult& r : results) {
    const ExpertWireBytes& b = r.wire_per_step;
    char ratio[32] = "-";
    if (r.wire != ExpertWire::kLocal && bf16 != nullptr) {
      std::snprintf(ratio, sizeof ratio, "%.3fx",
                    Ratio(static_cast<double>(b.remote()),
                          static_cast<double>(bf16->wire_per_step.remote())));
    }
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %.1f | %.2fx | %.3f | %.3f | %.3f | %s | %.3f |\n",
                  r.layout.c_str(), r.step_ms, base ? Ratio(r.step_ms, base->step_ms) : 0.0,
                  static_cast<double>(b.remote()) / 1e6,
                  static_cast<double>(b.dispatch_forward) / 1e6,
                  static_cast<double>(b.combine_backward) / 1e6, ratio,
                  static_cast<double>(r.grad_sum_bytes_per_step) / 1e6);
    t += line;
  }
  return t;
}

}  // namespace mxtrain
