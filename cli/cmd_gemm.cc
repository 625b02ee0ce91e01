// mxtrain gemm and mxtrain grouped-gemm: float32/bf16 .npy operands, quantized rowwise to
// MXFP8 (quantize.h) and multiplied by the library's MX GEMM (gemm.h); the product is
// written as float32 ('<f4') or bf16 bits ('<u2').
//
// The command only parses, checks what it can name by file (ranks, dtypes, shapes) before
// any work, and calls the library; the library's own checks stay the authority.
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/group_list.h"
#include "mxtrain/npy.h"
#include "mxtrain/quantize.h"
#include "mxtrain/testing.h"

namespace mxtrain::cli {
namespace {

constexpr char kGemmUsage[] =
    R"(usage: mxtrain gemm A.npy B.npy --out C.npy [flags]
  Quantizes A [M, K] and B [N, K] (float32 '<f4' or bf16 bits '<u2') rowwise to MXFP8 and
  writes C = A . B^T [M, N] from the MX GEMM, as float32 ('<f4') or bf16 bits ('<u2').
  --out C.npy                      output file (required)
  --format-a e4m3|e5m2             element format of A (default e4m3)
  --format-b e4m3|e5m2             element format of B (default e4m3)
  --scale rceil|floor|ceil|even    scale rule of both operands (default rceil)
  --bias b.npy                     float32 [N], added to every row of C
  --out-dtype f32|bf16             output type (default f32)
  --path NAME                      GEMM path (default: the best one; see below)
  --threads T                      worker threads (default 0: all cores)
)";

constexpr char kGroupedGemmUsage[] =
    R"(usage: mxtrain grouped-gemm X.npy W.npy --group-list N1,N2,... --out Y.npy [flags]
  Mixture-of-experts fprop: X [M, K] holds tokens sorted by expert, W [E, N, K] one matrix
  per expert (float32 '<f4' or bf16 bits '<u2'). Both are quantized rowwise to MXFP8 and
  the rows of group e of Y [M, N] are X_e . W[e]^T, as float32 or bf16 bits.
  --out Y.npy                      output file (required)
  --group-list N1,N2,...           E token groups covering the M rows of X (required)
  --group-list-type cumsum|counts  cumulative group ends or group sizes (default cumsum)
  --format-x e4m3|e5m2             element format of X (default e4m3)
  --format-w e4m3|e5m2             element format of W (default e4m3)
  --scale rceil|floor|ceil|even    scale rule of both operands (default rceil)
  --bias b.npy                     float32 [E, N]: row e is added to the rows of group e
  --out-dtype f32|bf16             output type (default f32)
  --path NAME                      GEMM path (default: the best one; see below)
  --threads T                      worker threads (default 0: all cores)
)";

// More threads than this is a typo, not a machine.
constexpr int64_t kMaxThreads = 1024;

// The usage text, then the paths of this machine (they depend on the CPU).
int PrintUsage(const char* usage) {
  std::fputs(usage, stdout);
  std::printf("  GEMM paths on this machine, best first: %s\n", JoinedGemmPaths().c_str());
  return 0;
}

// The flags both commands accept, then the command's own.
std::vector<FlagSpec> WithCommonFlags(std::initializer_list<FlagSpec> own) {
  std::vector<FlagSpec> flags = {{"out"},       {"scale"}, {"bias"},
                                 {"out-dtype"}, {"path"},  {"threads"}};
  flags.insert(flags.end(), own);
  return flags;
}

// The values of the shared flags, parsed before any file is read so that a typo costs nothing.
struct CommonOptions {
  std::string out_path;
  QuantizeOptions first;   // A or X
  QuantizeOptions second;  // B or W
  GemmOptions gemm;
  std::string out_dtype_text;
};

CommonOptions ParseCommon(const ParsedArgs& args, std::string_view first_flag,
                          std::string_view second_flag) {
  CommonOptions c;
  c.out_path = args.Require("out");
  const ScaleRule rule = ParseScaleRule(args.Get("scale", "rceil"));
  const int threads =
      static_cast<int>(ParseInt(args.Get("threads", "0"), "--threads", 0, kMaxThreads));
  c.first.format = ParseElementFormat(args.Get(first_flag, "e4m3"));
  c.second.format = ParseElementFormat(args.Get(second_flag, "e4m3"));
  for (QuantizeOptions* q : {&c.first, &c.second}) {
    q->rule = rule;
    q->threads = threads;
  }
  c.out_dtype_text = args.Get("out-dtype", "f32");
  MXTRAIN_CHECK(c.out_dtype_text == "f32" || c.out_dtype_text == "bf16", "--out-dtype value '",
                c.out_dtype_text, "' is not f32 or bf16");
  c.gemm.out_dtype = c.out_dtype_text == "f32" ? DType::kF32 : DType::kBF16;
  c.gemm.threads = threads;
  if (args.Has("path")) ForceGemmPathFlag(args.Get("path"));
  return c;
}

// Reads an operand that must be float32 or bf16 of the given rank; layout names the axes
// for the message ("[M, K]").
Tensor ReadOperand(const std::string& path, int rank, std::string_view layout,
                   std::string_view command) {
  Tensor t = ReadNpy(path);
  MXTRAIN_CHECK(t.dtype() != DType::kU8, "'", path, "' holds uint8 data; ", command,
                " needs float32 ('<f4') or bf16 bits ('<u2')");
  MXTRAIN_CHECK(t.rank() == rank, "'", path, "' has shape ", t.shape().ToString(), "; ", command,
                " needs a ", rank, "-D ", layout, " array");
  return t;
}

// The --bias file, if given: float32 of exactly the expected shape (layout names its axes).
std::optional<Tensor> ReadBias(const ParsedArgs& args, const Shape& expected,
                               std::string_view layout) {
  if (!args.Has("bias")) return std::nullopt;
  const std::string path = args.Get("bias");
  Tensor bias = ReadNpy(path);
  MXTRAIN_CHECK(bias.dtype() == DType::kF32, "'", path, "' holds ", Name(bias.dtype()),
                " data; --bias needs float32 ('<f4')");
  MXTRAIN_CHECK(bias.shape() == expected, "'", path, "' has shape ", bias.shape().ToString(),
                "; --bias needs ", layout, " = ", expected.ToString());
  return bias;
}

// The library checks this too, but only after quantizing and without the file names.
void CheckContraction(const std::string& first_path, const Tensor& first,
                      const std::string& second_path, const Tensor& second) {
  MXTRAIN_CHECK(first.shape()[-1] == second.shape()[-1], "contraction lengths differ: '",
                first_path, "' ", first.shape().ToString(), " has K = ", first.shape()[-1], ", '",
                second_path, "' ", second.shape().ToString(), " has K = ", second.shape()[-1]);
}

void PrintSummary(const std::string& out_path, const Tensor& y, const CommonOptions& c,
                  const char* first, const char* second, const std::string& extra) {
  std::printf("wrote %s %s (%s; %s %s, %s %s, %s%s; gemm path %s)\n", out_path.c_str(),
              y.shape().ToString().c_str(), c.out_dtype_text.c_str(), first,
              Name(c.first.format).data(), second, Name(c.second.format).data(),
              Name(c.first.rule).data(), extra.c_str(), CurrentGemmPath().c_str());
}

int Gemm(const std::vector<std::string>& argv) {
  const ParsedArgs args =
      ParsedArgs::Parse(argv, "mxtrain gemm", WithCommonFlags({{"format-a"}, {"format-b"}}));
  if (args.help()) return PrintUsage(kGemmUsage);
  args.ExpectPositional(2, "two input files A.npy B.npy");
  const std::string& a_path = args.positional()[0];
  const std::string& b_path = args.positional()[1];
  CommonOptions c = ParseCommon(args, "format-a", "format-b");

  const Tensor a = ReadOperand(a_path, 2, "[M, K]", "gemm");
  const Tensor b = ReadOperand(b_path, 2, "[N, K]", "gemm");
  CheckContraction(a_path, a, b_path, b);
  const std::optional<Tensor> bias = ReadBias(args, Shape{b.shape()[0]}, "float32 [N]");
  if (bias) c.gemm.bias = &*bias;

  const Tensor y = MxGemm(QuantizeRowwise(a, c.first), QuantizeRowwise(b, c.second), c.gemm);
  WriteNpy(c.out_path, y);
  PrintSummary(c.out_path, y, c, "A", "B", "");
  return 0;
}

int GroupedGemm(const std::vector<std::string>& argv) {
  const ParsedArgs args = ParsedArgs::Parse(
      argv, "mxtrain grouped-gemm",
      WithCommonFlags({{"group-list"}, {"group-list-type"}, {"format-x"}, {"format-w"}}));
  if (args.help()) return PrintUsage(kGroupedGemmUsage);
  args.ExpectPositional(2, "two input files X.npy W.npy");
  const std::string& x_path = args.positional()[0];
  const std::string& w_path = args.positional()[1];
  CommonOptions c = ParseCommon(args, "format-x", "format-w");
  const std::vector<int64_t> group_values =
      ParseIntList(args.Require("group-list"), "--group-list");
  const GroupListType group_type = ParseGroupListType(args.Get("group-list-type", "cumsum"));

  const Tensor x = ReadOperand(x_path, 2, "[M, K]", "grouped-gemm");
  const Tensor w = ReadOperand(w_path, 3, "[E, N, K]", "grouped-gemm");
  CheckContraction(x_path, x, w_path, w);
  const GroupList groups = GroupList::Make(group_values, group_type, x.shape()[0]);
  const int64_t experts = w.shape()[0];
  MXTRAIN_CHECK(groups.num_groups() == experts, "--group-list has ", groups.num_groups(),
                groups.num_groups() == 1 ? " group" : " groups", " but '", w_path,
                "' holds E = ", experts, experts == 1 ? " expert" : " experts");
  const std::optional<Tensor> bias = ReadBias(args, Shape{experts, w.shape()[1]}, "float32 [E, N]");
  if (bias) c.gemm.bias = &*bias;

  const Tensor y =
      MxGroupedGemm(QuantizeRowwise(x, c.first), QuantizeRowwise(w, c.second), groups, c.gemm);
  WriteNpy(c.out_path, y);
  PrintSummary(c.out_path, y, c, "X", "W",
               StrCat(", ", experts, experts == 1 ? " expert" : " experts"));
  return 0;
}

}  // namespace

int RunGemm(const std::vector<std::string>& args) {
  return RunReportingErrors([&] { return Gemm(args); });
}

int RunGroupedGemm(const std::vector<std::string>& args) {
  return RunReportingErrors([&] { return GroupedGemm(args); });
}

std::string JoinedGemmPaths() {
  std::string joined;
  for (const std::string& p : AvailableGemmPaths()) joined += (joined.empty() ? "" : ", ") + p;
  return joined;
}

void ForceGemmPathFlag(const std::string& path) {
  // Checked here as well as by ForceGemmPath so that the message lists the choices.
  const std::vector<std::string> paths = AvailableGemmPaths();
  MXTRAIN_CHECK(std::find(paths.begin(), paths.end(), path) != paths.end(), "--path value '", path,
                "' is not a GEMM path of this machine (", JoinedGemmPaths(), ")");
  ForceGemmPath(path);
}

}  // namespace mxtrain::cli
