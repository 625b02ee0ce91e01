// Metrics CSV, summary.json, the comparison table and the plot (train.h, train_report.h).
#include "mxtrain/train_report.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mxtrain/error.h"

#if __has_include("mxtrain/plot.h")
#include "mxtrain/plot.h"
#define MXTRAIN_HAVE_PLOT 1
#endif

namespace mxtrain {

namespace {

std::string Num(double v) {
  if (std::isnan(v)) return "nan";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// JSON has no NaN or Inf: null.
std::string JsonNum(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

constexpr const char* kCsvHeader =
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
                  Num(m.lr), ",", Num(m.grad_norm), ",", Num(m.step_ms), ",",
                  Num(m.tokens_per_s), ",", m.peak_bytes, ",", m.saved_bytes, ",",
                  m.saved_alloc_bytes, ",", m.cache_hits, ",", m.cache_misses, "\n");
  }
  return out;
}

std::vector<StepMetrics> ParseMetricsCsv(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  MXTRAIN_CHECK(std::getline(in, line) && line == kCsvHeader,
                "metrics CSV does not start with the expected header");
  std::vector<StepMetrics> steps;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string cell; std::getline(ls, cell, ',');) f.push_back(cell);
    MXTRAIN_CHECK(f.size() == 13, "metrics CSV line has ", f.size(), " fields: '", line, "'");
    try {
      StepMetrics m;
      m.step = std::stoll(f[0]);
      double* d[] = {&m.train_loss, &m.aux_loss, &m.val_loss, &m.lr,
                     &m.grad_norm,  &m.step_ms,  &m.tokens_per_s};
      for (int i = 0; i < 7; ++i) *d[i] = std::strtod(f[1 + i].c_str(), nullptr);
      int64_t* n[] = {&m.peak_bytes, &m.saved_bytes, &m.saved_alloc_bytes, &m.cache_hits,
                      &m.cache_misses};
      for (int i = 0; i < 5; ++i) *n[i] = std::stoll(f[8 + i]);
      steps.push_back(m);
    } catch (const std::logic_error&) {
      Fail("metrics CSV line is not numeric: '", line, "'");
    }
  }
  return steps;
}

std::string SummaryJson(const std::vector<TrainResult>& runs) {
  std::string out = "[\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const TrainResult& r = runs[i];
    const bool mx = r.recipe.mxfp8();
    const std::string in = mx ? JsonString(std::string(Name(r.recipe.input_policy()))) : "null";
    const std::string w = mx ? JsonString(std::string(Name(r.recipe.weight_policy()))) : "null";
    out += StrCat("  {\"name\": ", JsonString(r.name), ", \"precision\": ",
                  JsonString(std::string(Name(r.recipe.precision()))), ", \"recipe\": ",
                  JsonString(r.recipe.ToString()), ", \"input_policy\": ", in,
                  ", \"weight_policy\": ", w, ", \"final_train_loss\": ",
                  JsonNum(r.final_train_loss), ", \"final_val_loss\": ",
                  JsonNum(r.final_val_loss), ", \"tokens_per_s\": ", JsonNum(r.tokens_per_s),
                  ", \"step_ms\": ", JsonNum(r.step_ms), ", \"peak_bytes\": ", r.peak_bytes,
                  ", \"saved_bytes\": ", r.saved_bytes, ", \"steps\": ", r.steps.size(),
                  ", \"parameters\": ", r.parameters, ", \"cache_hits\": ", r.cache_hits,
                  ", \"cache_misses\": ", r.cache_misses, ", \"resumed_from\": ",
                  r.resumed_from, ", \"seconds\": ", JsonNum(r.seconds), "}",
                  i + 1 < runs.size() ? "," : "", "\n");
  }
  return out + "]\n";
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
  std::snprintf(line, sizeof line, "%-16s %10s %10s %9s %10s %9s %10s %10s\n", "run",
                "train_loss", "val_loss", "gap_bf16", "tokens/s", "step_ms", "peak_MiB",
                "saved_MiB");
  out += line;
  for (const TrainResult& r : runs) {
    std::string gap = "-";
    if (base != nullptr && base != &r && base->final_val_loss != 0) {
      char g[32];
      std::snprintf(g, sizeof g, "%+.2f%%",
                    100.0 * (r.final_val_loss - base->final_val_loss) / base->final_val_loss);
      gap = g;
    }
    std::snprintf(line, sizeof line, "%-16s %10.4f %10.4f %9s %10.0f %9.1f %10s %10s\n",
                  r.name.c_str(), r.final_train_loss, r.final_val_loss, gap.c_str(),
                  r.tokens_per_s, r.step_ms, Mib(r.peak_bytes).c_str(),
                  Mib(r.saved_bytes).c_str());
    out += line;
  }
  return out;
}

std::string TrainingPlotSvg(const std::vector<TrainResult>& runs) {
#ifdef MXTRAIN_HAVE_PLOT
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
#else
  (void)runs;
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"520\" height=\"40\"><text x=\"10\" "
         "y=\"25\">plotting is not available in this build</text></svg>\n";
#endif
}

void WriteFileAtomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MXTRAIN_CHECK(out.good(), "cannot write '", tmp, "'");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    MXTRAIN_CHECK(out.good(), "cannot write '", tmp, "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  MXTRAIN_CHECK(!ec, "cannot rename '", tmp, "' to '", path, "': ", ec.message());
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

std::string CheckpointPath(const std::string& dir, const std::string& run_name) {
  return (std::filesystem::path(dir) / run_name / "checkpoint.safetensors").string();
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
