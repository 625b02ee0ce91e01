// mxtrain quantize and mxtrain dequantize: .npy arrays in, the canonical MX exchange layout
// (NUMERICS.md §6: uint8 data in the input's shape, uint8 E8M0 scales) out, and back.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "args.h"
#include "commands.h"
#include "mxtrain/error.h"
#include "mxtrain/group_list.h"
#include "mxtrain/npy.h"
#include "mxtrain/quantize.h"

namespace mxtrain::cli {
namespace {

constexpr char kQuantizeUsage[] =
    R"(usage: mxtrain quantize IN.npy --out PREFIX [flags]
  Quantizes a float32 ('<f4') or bf16 ('<u2' bit patterns) array of rank >= 2, viewed as
  [..., M, K], to MXFP8 and writes PREFIX.data.npy (uint8, the input's shape) and
  PREFIX.scale.npy (uint8 E8M0 exponents).
  --out PREFIX                     output prefix (required)
  --format e4m3|e5m2               element format (default e4m3)
  --scale rceil|floor|ceil|even    scale rule, NUMERICS.md section 4 (default rceil)
  --axis -1|-2|both                -1: rowwise 1x32 blocks, scale [..., M, ceil(K/32)]
                                   -2: columnwise 32x1 blocks, scale [..., ceil(M/32), K]
                                   both: PREFIX.rowwise.{data,scale}.npy and
                                         PREFIX.columnwise.{data,scale}.npy (default -1)
  --group-list N1,N2,...           token groups of a 2-D [M, K] input: columnwise blocks
                                   restart at each group (implies --axis -2); scale
                                   [sum_g ceil(m_g/32), K]
  --group-list-type cumsum|counts  cumulative group ends or group sizes (default cumsum)
  --threads T                      worker threads (default 0: all cores)
)";

constexpr char kDequantizeUsage[] =
    R"(usage: mxtrain dequantize PREFIX --out OUT.npy [flags]
  Reads PREFIX.data.npy and PREFIX.scale.npy (uint8, as mxtrain quantize writes them) and
  writes their values as float32 ('<f4') or bf16 bits ('<u2').
  --out OUT.npy                    output file (required)
  --format e4m3|e5m2               element format of the data (default e4m3)
  --axis -1|-2                     blocked axis of the data (default -1)
  --group-list N1,N2,...           token groups of 2-D data (implies --axis -2)
  --group-list-type cumsum|counts  (default cumsum)
  --dtype f32|bf16                 output type (default f32)
  --threads T                      worker threads (default 0: all cores)
)";

// More threads than this is a typo, not a machine.
constexpr int64_t kMaxThreads = 1024;

enum class AxisChoice { kRowwise, kColumnwise, kBoth };

// Where the blocks run, as the flags --axis, --group-list and --group-list-type say.
struct Layout {
  AxisChoice axis = AxisChoice::kRowwise;
  std::optional<std::vector<int64_t>> group_values;
  GroupListType group_type = GroupListType::kCumsum;
  std::string axis_text;
};

Layout ParseLayout(const ParsedArgs& args, bool allow_both) {
  Layout layout;
  const bool grouped = args.Has("group-list");
  MXTRAIN_CHECK(grouped || !args.Has("group-list-type"), "--group-list-type needs --group-list");
  // Token groups only exist for columnwise blocks, so a group list alone implies -2.
  layout.axis_text = args.Get("axis", grouped ? "-2" : "-1");
  if (layout.axis_text == "-1") {
    layout.axis = AxisChoice::kRowwise;
  } else if (layout.axis_text == "-2") {
    layout.axis = AxisChoice::kColumnwise;
  } else if (layout.axis_text == "both" && allow_both) {
    layout.axis = AxisChoice::kBoth;
  } else {
    Fail("--axis value '", layout.axis_text, "' is not ",
         allow_both ? "-1, -2 or both" : "-1 or -2");
  }
  if (grouped) {
    MXTRAIN_CHECK(layout.axis == AxisChoice::kColumnwise, "--group-list (token-grouped ",
                  "columnwise blocks) conflicts with --axis ", layout.axis_text);
    layout.group_values = ParseIntList(args.Get("group-list"), "--group-list");
    layout.group_type = ParseGroupListType(args.Get("group-list-type", "cumsum"));
  }
  return layout;
}

GroupList MakeGroups(const Layout& layout, const Shape& shape, const std::string& file) {
  MXTRAIN_CHECK(shape.rank() == 2, "--group-list needs 2-D [M, K] data, but '", file,
                "' has shape ", shape.ToString());
  return GroupList::Make(*layout.group_values, layout.group_type, shape[0]);
}

int ParseThreads(const ParsedArgs& args) {
  return static_cast<int>(ParseInt(args.Get("threads", "0"), "--threads", 0, kMaxThreads));
}

// Writes each MX tensor as <prefix>.data.npy and <prefix>.scale.npy, all files as one set,
// and returns "a.data.npy [4, 64], a.scale.npy [4, 2]" for the summary line.
std::string WriteMx(const std::vector<std::pair<std::string, const MxTensor*>>& outputs) {
  std::vector<std::pair<std::string, const Tensor*>> files;
  std::string listing;
  for (const auto& [prefix, mx] : outputs) {
    for (const auto& [suffix, tensor] :
         {std::pair{".data.npy", &mx->data()}, std::pair{".scale.npy", &mx->scales()}}) {
      files.emplace_back(prefix + suffix, tensor);
      listing += (listing.empty() ? "" : ", ") + prefix + suffix + " " + tensor->shape().ToString();
    }
  }
  WriteNpyFiles(files);
  return listing;
}

// mxtrain 0.1 named the columnwise half of --axis both PREFIX.colwise.*. For one release
// those names stay, as hard links to PREFIX.columnwise.* (copies where the file system has
// no links), with a note on stderr; "columnwise" is the library's and the package's word.
void WriteDeprecatedColwiseNames(const std::string& prefix) {
  namespace fs = std::filesystem;
  for (const char* suffix : {".data.npy", ".scale.npy"}) {
    const fs::path from = prefix + ".columnwise" + suffix;
    const fs::path to = prefix + ".colwise" + suffix;
    std::error_code ec;
    fs::remove(to, ec);  // a name left by an earlier run would keep its old bytes
    fs::create_hard_link(from, to, ec);
    if (ec) {
      ec.clear();
      fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    }
    MXTRAIN_CHECK(!ec, "cannot write '", to.string(), "': ", ec.message());
  }
  PrintDeprecation(StrCat(prefix, ".colwise.{data,scale}.npy (the same files as ", prefix,
                          ".columnwise.*) go in the next release; read ", prefix, ".columnwise.*"));
}

int Quantize(const std::vector<std::string>& argv) {
  const ParsedArgs args = ParsedArgs::Parse(
      argv, "mxtrain quantize",
      {{"out"}, {"format"}, {"scale"}, {"axis"}, {"group-list"}, {"group-list-type"}, {"threads"}});
  if (args.help()) {
    std::fputs(kQuantizeUsage, stdout);
    return 0;
  }
  args.ExpectPositional(1, "one input file IN.npy");
  const std::string& in_path = args.positional()[0];
  const std::string prefix = args.Require("out");
  QuantizeOptions options;
  options.format = ParseElementFormat(args.Get("format", "e4m3"));
  options.rule = ParseScaleRule(args.Get("scale", "rceil"));
  options.threads = ParseThreads(args);
  const Layout layout = ParseLayout(args, /*allow_both=*/true);

  const Tensor x = ReadNpy(in_path);
  MXTRAIN_CHECK(x.dtype() != DType::kU8, "'", in_path, "' holds uint8 data; quantize needs ",
                "float32 ('<f4') or bf16 bits ('<u2')");
  MXTRAIN_CHECK(x.rank() >= 2, "'", in_path, "' has shape ", x.shape().ToString(),
                "; quantize needs rank >= 2 ([..., M, K])");

  std::string blocks;
  std::string listing;
  if (layout.axis == AxisChoice::kBoth) {
    const DualMx dual = QuantizeDual(x, options);
    listing =
        WriteMx({{prefix + ".rowwise", &dual.rowwise}, {prefix + ".columnwise", &dual.columnwise}});
    WriteDeprecatedColwiseNames(prefix);
    blocks = "rowwise and columnwise";
  } else {
    MxTensor q;
    if (layout.group_values) {
      const GroupList groups = MakeGroups(layout, x.shape(), in_path);
      q = QuantizeGrouped(x, groups, options);
      blocks = StrCat("columnwise, ", groups.num_groups(),
                      groups.num_groups() == 1 ? " token group" : " token groups");
    } else if (layout.axis == AxisChoice::kRowwise) {
      q = QuantizeRowwise(x, options);
      blocks = "rowwise";
    } else {
      q = QuantizeColumnwise(x, options);
      blocks = "columnwise";
    }
    listing = WriteMx({{prefix, &q}});
  }
  std::printf("wrote %s (%s, %s, %s)\n", listing.c_str(), Name(options.format).data(),
              Name(options.rule).data(), blocks.c_str());
  return 0;
}

// Reads a file that must hold uint8 MX data or scales.
Tensor ReadMxPart(const std::string& path) {
  Tensor t = ReadNpy(path, MemoryCategory::kQuantized);
  MXTRAIN_CHECK(t.dtype() == DType::kU8, "'", path, "' holds ", Name(t.dtype()),
                " data; MX data and scales are uint8 ('|u1')");
  return t;
}

int Dequantize(const std::vector<std::string>& argv) {
  const ParsedArgs args = ParsedArgs::Parse(
      argv, "mxtrain dequantize",
      {{"out"}, {"format"}, {"axis"}, {"group-list"}, {"group-list-type"}, {"dtype"}, {"threads"}});
  if (args.help()) {
    std::fputs(kDequantizeUsage, stdout);
    return 0;
  }
  args.ExpectPositional(1, "one input PREFIX (of PREFIX.data.npy and PREFIX.scale.npy)");
  const std::string& prefix = args.positional()[0];
  const std::string out_path = args.Require("out");
  const ElementFormat format = ParseElementFormat(args.Get("format", "e4m3"));
  const std::string dtype_text = args.Get("dtype", "f32");
  MXTRAIN_CHECK(dtype_text == "f32" || dtype_text == "bf16", "--dtype value '", dtype_text,
                "' is not f32 or bf16");
  const DType out_dtype = dtype_text == "f32" ? DType::kF32 : DType::kBF16;
  const int threads = ParseThreads(args);
  const Layout layout = ParseLayout(args, /*allow_both=*/false);

  const std::string data_path = prefix + ".data.npy";
  const std::string scale_path = prefix + ".scale.npy";
  Tensor data = ReadMxPart(data_path);
  Tensor scales = ReadMxPart(scale_path);
  MXTRAIN_CHECK(data.rank() >= 2, "'", data_path, "' has shape ", data.shape().ToString(),
                "; MX data needs rank >= 2 ([..., M, K])");
  std::optional<GroupList> groups;
  if (layout.group_values) groups = MakeGroups(layout, data.shape(), data_path);
  const BlockAxis axis =
      layout.axis == AxisChoice::kRowwise ? BlockAxis::kRowwise : BlockAxis::kColumnwise;
  MxTensor q;
  try {
    // The scale rule is not stored in the files and dequantization does not depend on it.
    q = MxTensor(std::move(data), std::move(scales), format, ScaleRule::kRceil, axis,
                 std::move(groups));
  } catch (const Error& e) {
    Fail("'", scale_path, "' does not match '", data_path, "': ", e.what());
  }
  const Tensor y = mxtrain::Dequantize(q, out_dtype, threads);
  WriteNpy(out_path, y);
  std::printf("wrote %s %s (%s)\n", out_path.c_str(), y.shape().ToString().c_str(),
              dtype_text.c_str());
  return 0;
}

}  // namespace

int RunQuantize(const std::vector<std::string>& args) {
  return RunReportingErrors([&] { return Quantize(args); });
}

int RunDequantize(const std::vector<std::string>& args) {
  return RunReportingErrors([&] { return Dequantize(args); });
}

}  // namespace mxtrain::cli
