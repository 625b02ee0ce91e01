// Metrics CSV, summary.json, the comparison table and the plot (train.h, train_report.h).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/file_util.h"
#include "io/json_util.h"
#include "mxtrain/error.h"
#include "mxtrain/train/plot.h"
#include "mxtrain/train/train_report.h"

namespace mxtrain {

namespace {

std::string Num(double v) {
  if (std::isnan(v)) return "nan";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

constexpr const char* kCsvHeader =
    "step,train_loss,aux_loss,val_loss,lr,grad_norm,step_ms,tokens_per_s,peak_bytes,"
    "saved_bytes,saved_alloc_bytes,cache_hits,cache_misses,inputs_deferred,weights_deferred,"
    "wire_bytes";
// The headers before the wire bytes and before the policy counts (checkpoints written then
// still resume).
constexpr const char* kCsvHeaderV2 =
    "step,train_loss,aux_loss,val_loss,lr,grad_norm,step_ms,tokens_per_s,peak_bytes,"
    "saved_bytes,saved_alloc_bytes,cache_hits,cache_misses,inputs_deferred,weights_deferred";
constexpr const char* kCsvHeaderV1 =
    "step,train_loss,aux_loss,val_loss,lr,grad_norm,step_ms,tokens_per_s,peak_bytes,"
    "saved_bytes,saved_alloc_bytes,cache_hits,cache_misses";

std::string Mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

std::string MetricsCsv(const std::vector<StepMetrics>& steps) {
  std::string out = std::string(kCsvHeader) + "\n";
  for (const StepMetrics& m : steps) {
    out += StrCat(m.step, ",", Num(m.train_loss), ",", Num(m.aux_loss), ",", Num(m.val_loss), ",",
                  Num(m.lr), ",", Num(m.grad_norm), ",", Num(m.step_ms), ",", Num(m.tokens_per_s),
                  ",", m.peak_bytes, ",", m.saved_bytes, ",", m.saved_alloc_bytes, ",",
                  m.cache_hits, ",", m.cache_misses, ",", m.inputs_deferred, ",",
                  m.weights_deferred, ",", m.wire_bytes, "\n");
  }
  return out;
}

std::vector<StepMetrics> ParseMetricsCsv(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  MXTRAIN_CHECK(std::getline(in, line) &&
                    (line == kCsvHeader || line == kCsvHeaderV2 || line == kCsvHeaderV1),
                "metrics CSV does not start with the expected header");
  const size_t fields = line == kCsvHeader ? 16 : line == kCsvHeaderV2 ? 15 : 13;
  std::vector<StepMetrics> steps;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string cell; std::getline(ls, cell, ',');) f.push_back(cell);
    MXTRAIN_CHECK(f.size() == fields, "metrics CSV line has ", f.size(), " fields, not ", fields,
                  ": '", line, "'");
    try {
      StepMetrics m;
      m.step = std::stoll(f[0]);
      double* d[] = {&m.train_loss, &m.aux_loss, &m.val_loss,    &m.lr,
                     &m.grad_norm,  &m.step_ms,  &m.tokens_per_s};
      for (int i = 0; i < 7; ++i) *d[i] = std::strtod(f[1 + i].c_str(), nullptr);
      int64_t* n[] = {&m.peak_bytes, &m.saved_bytes, &m.saved_alloc_bytes, &m.cache_hits,
                      &m.cache_misses};
      for (int i = 0; i < 5; ++i) *n[i] = std::stoll(f[8 + i]);
      if (fields >= 15) {
        m.inputs_deferred = std::stoll(f[13]);
        m.weights_deferred = std::stoll(f[14]);
      }
      if (fields >= 16) m.wire_bytes = std::stoll(f[15]);
      steps.push_back(m);
    } catch (const std::logic_error&) {
      Fail("metrics CSV line is not numeric: '", line, "'");
    }
  }
  return steps;
}

std::string SummaryJson(const std::vector<TrainResult>& runs) {
  using internal::Json;
  // JSON has no NaN or Inf: a non-finite figure is null. A whole number is written as an
  // integer ("3", not nlohmann's "3.0"), as summary.json always has been.
  auto num = [](double v) -> Json {
    if (!std::isfinite(v)) return nullptr;
    if (v == std::trunc(v) && std::fabs(v) <= 9007199254740992.0) return static_cast<int64_t>(v);
    return v;
  };
  Json list = Json::array();
  for (const TrainResult& r : runs) {
    const bool mx = r.recipe.mxfp8();
    Json o = Json::object();
    o["name"] = r.name;
    o["precision"] = Name(r.recipe.precision());
    o["recipe"] = r.recipe.ToString();
    o["input_policy"] = mx ? Json(Name(r.recipe.input_policy())) : Json();
    o["weight_policy"] = mx ? Json(Name(r.recipe.weight_policy())) : Json();
    o["final_train_loss"] = num(r.final_train_loss);
    o["final_val_loss"] = num(r.final_val_loss);
    o["tokens_per_s"] = num(r.tokens_per_s);
    o["step_ms"] = num(r.step_ms);
    o["peak_bytes"] = r.peak_bytes;
    o["saved_bytes"] = r.saved_bytes;
    o["steps"] = static_cast<int64_t>(r.steps.size());
    o["parameters"] = r.parameters;
    o["cache_hits"] = r.cache_hits;
    o["cache_misses"] = r.cache_misses;
    o["resumed_from"] = r.resumed_from;
    // What each MXFP8 layer saved in the last step: the auto policy's choices.
    Json policies = mx ? Json::object() : Json();
    for (const LayerPolicy& lp : r.policies) {
      const auto name = [](const std::optional<SavePolicy>& p) {
        return p ? Json(Name(*p)) : Json("hp");
      };
      policies[lp.layer] = Json{{"input", name(lp.input)}, {"weight", name(lp.weight)}};
    }
    o["policies"] = std::move(policies);
    // The processes: ranks, expert parallelism, how tokens reached their experts, and the
    // bytes that crossed between ranks per step (median; all ranks' together).
    o["world_size"] = r.world_size;
    o["expert_parallel"] = r.expert_parallel;
    o["expert_wire"] = Name(r.wire);
    o["wire_bytes_per_step"] = r.wire_bytes_per_step;
    o["seconds"] = num(r.seconds);
    list.push_back(std::move(o));
  }
  return internal::DumpJson(list, 2) + "\n";
}

std::string ComparisonTable(const std::vector<TrainResult>& runs) {
  const TrainResult* base = nullptr;
  for (const TrainResult& r : runs) {
    if (r.recipe.precision() == Precision::kBf16) {
      base = &r;
      break;
    }
  }
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line, "%-20s %10s %10s %9s %10s %9s %10s %10s\n", "run", "train_loss",
                "val_loss", "gap_bf16", "tokens/s", "step_ms", "peak_MiB", "saved_MiB");
  out += line;
  for (const TrainResult& r : runs) {
    std::string gap = "-";
    if (base != nullptr && base != &r && base->final_val_loss != 0) {
      char g[32];
      std::snprintf(g, sizeof g, "%+.2f%%",
                    100.0 * (r.final_val_loss - base->final_val_loss) / base->final_val_loss);
      gap = g;
    }
    std::snprintf(line, sizeof line, "%-20s %10.4f %10.4f %9s %10.0f %9.1f %10s %10s\n",
                  r.name.c_str(), r.final_train_loss, r.final_val_loss, gap.c_str(), r.tokens_per_s,
                  r.step_ms, Mib(r.peak_bytes).c_str(), Mib(r.saved_bytes).c_str());
    out += line;
  }
  return out;
}

std::string TrainingPlotSvg(const std::vector<TrainResult>& runs) {
  PlotPanel train{"training loss", "step", "loss (nats)", {}, false};
  PlotPanel val{"validation loss", "step", "loss (nats)", {}, false};
  PlotPanel peak{"peak memory per step", "step", "MiB", {}, false};
  PlotPanel saved{"held for backward per step", "step", "MiB", {}, false};
  for (const TrainResult& r : runs) {
    PlotSeries t{r.name, {}, {}}, v{r.name, {}, {}}, p{r.name, {}, {}}, s{r.name, {}, {}};
    for (const StepMetrics& m : r.steps) {
      const double x = static_cast<double>(m.step);
      t.x.push_back(x);
      t.y.push_back(m.train_loss);
      if (!std::isnan(m.val_loss)) {
        v.x.push_back(x);
        v.y.push_back(m.val_loss);
      }
      p.x.push_back(x);
      p.y.push_back(static_cast<double>(m.peak_bytes) / (1024.0 * 1024.0));
      s.x.push_back(x);
      s.y.push_back(static_cast<double>(m.saved_bytes) / (1024.0 * 1024.0));
    }
    train.series.push_back(std::move(t));
    val.series.push_back(std::move(v));
    peak.series.push_back(std::move(p));
    saved.series.push_back(std::move(s));
  }
  return RenderSvg({train, val, peak, saved});
}

void WriteFileAtomic(const std::string& path, const std::string& bytes) {
  internal::CheckNotDirectory(path);
  internal::Temporaries temporaries;
  std::string tmp;
  internal::Fd fd(internal::CreateTemporary(path, &tmp));
  MXTRAIN_CHECK(fd.get() >= 0, "cannot write '", internal::Printable(path),
                "': ", std::strerror(errno));
  temporaries.paths().push_back(tmp);
  internal::WriteAll(fd.get(), bytes.data(), bytes.size(), path);
  internal::SyncAndClose(fd, path);
  internal::RenameFront(temporaries, path);
}

}  // namespace mxtrain

namespace mxtrain {

std::string MakeRunDirectory(const std::string& base) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(base, ec);
  MXTRAIN_CHECK(!ec, "cannot create directory '", base, "': ", ec.message());
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  for (int n = 1; n < 100000; ++n) {
    const fs::path p = fs::path(base) / StrCat(stamp, "-", n);
    if (fs::create_directory(p, ec)) return p.string();
    MXTRAIN_CHECK(!ec, "cannot create directory '", p.string(), "': ", ec.message());
  }
  Fail("cannot find a free run directory name under '", base, "'");
}

std::string RunSubdirectory(const std::string& dir, const std::string& run_name) {
  const std::string sub = (std::filesystem::path(dir) / run_name).string();
  std::error_code ec;
  std::filesystem::create_directories(sub, ec);
  MXTRAIN_CHECK(!ec, "cannot create directory '", sub, "': ", ec.message());
  return sub;
}

std::string CheckpointPath(const std::string& dir, const std::string& run_name, int rank,
                           int world_size) {
  const std::string file = world_size > 1
                               ? StrCat("checkpoint.rank", rank, "-of-", world_size, ".safetensors")
                               : std::string("checkpoint.safetensors");
  return (std::filesystem::path(dir) / run_name / file).string();
}

void WriteRunMetrics(const std::string& dir, const TrainResult& run) {
  const std::string sub = RunSubdirectory(dir, run.name);
  WriteFileAtomic((std::filesystem::path(sub) / "metrics.csv").string(), MetricsCsv(run.steps));
}

void WriteJobSummary(const std::string& dir, const std::vector<TrainResult>& runs) {
  WriteFileAtomic((std::filesystem::path(dir) / "summary.json").string(), SummaryJson(runs));
  WriteFileAtomic((std::filesystem::path(dir) / "plot.svg").string(), TrainingPlotSvg(runs));
}

}  // namespace mxtrain
