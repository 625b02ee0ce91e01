// The CLI's parsers on arbitrary arguments (one per line): flags, integers, integer lists
// made into group lists, shapes and numbers. Each either returns a value in its range or
// throws mxtrain::Error.
#include <cstdlib>
#include <string>
#include <vector>

#include "args.h"
#include "mxtrain/error.h"
#include "mxtrain/group_list.h"

namespace {

using namespace mxtrain;
using namespace mxtrain::cli;

void Values(const ParsedArgs& args) {
  int64_t m = 0;
  if (args.Has("m")) m = ParseInt(args.Get("m"), "--m", 0, int64_t{1} << 40);
  if (args.Has("threads")) {
    const int64_t t = ParseInt(args.Get("threads"), "--threads", 0, 1024);
    if (t < 0 || t > 1024) std::abort();
  }
  if (args.Has("group-list")) {
    const std::vector<int64_t> values = ParseIntList(args.Get("group-list"), "--group-list");
    if (values.empty()) std::abort();
    const GroupListType type = ParseGroupListType(args.Get("group-list-type", "cumsum"));
    const GroupList g = GroupList::Make(values, type, m);
    if (g.num_groups() != static_cast<int64_t>(values.size()) || g.total_rows() != m) {
      std::abort();
    }
  }
  if (args.Has("shape")) {
    const auto [rows, cols] = ParseShape2(args.Get("shape"), "--shape", 1 << 20);
    if (rows < 1 || cols < 1 || rows > (1 << 20) || cols > (1 << 20)) std::abort();
  }
  if (args.Has("lr")) {
    if (!(ParsePositiveDouble(args.Get("lr"), "--lr") > 0)) std::abort();
  }
  if (!args.positional().empty()) args.ExpectPositional(1, "one input file IN.npy");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> argv(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      argv.emplace_back();
    } else {
      argv.back() += static_cast<char>(data[i]);
    }
  }
  try {
    const ParsedArgs args = ParsedArgs::Parse(argv, "mxtrain fuzz",
                                              {{"m"},
                                               {"threads"},
                                               {"group-list"},
                                               {"group-list-type"},
                                               {"shape"},
                                               {"lr"},
                                               {"verbose", false}});
    Values(args);
  } catch (const Error&) {
  }
  return 0;
}
