// mxtrain: the command-line front end. Dispatches to a subcommand (commands.h); any error
// becomes one line "mxtrain: error: ..." on stderr and exit code 2.
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "mxtrain/error.h"

// The build may pass the project version; the fallback keeps a bare compile working.
#ifndef MXTRAIN_VERSION
#define MXTRAIN_VERSION "0.1.0"
#endif

namespace mxtrain::cli {
namespace {

constexpr char kUsage[] = R"(usage: mxtrain <command> [arguments]
       mxtrain --help | help [command]
       mxtrain --version

commands:
  quantize     float32/bf16 .npy -> MXFP8 data and scales (.npy, uint8)
  dequantize   MXFP8 data and scales -> float32/bf16 .npy
  gemm         C = A . B^T of float32/bf16 .npy operands quantized to MXFP8
  grouped-gemm mixture-of-experts Y = X_e . W[e]^T per token group, quantized to MXFP8
  bench        quantize and GEMM throughput against same-run baselines (JSON lines)
  demo         quantize a built-in tensor every way and print the error table
  train        train the MoE byte-level transformer in bf16 and MXFP8 and compare (the main job)

Errors print one line "mxtrain: error: ..." on stderr and exit with code 2 (train: 3 when
the loss becomes NaN or Inf).
)";

using Command = int (*)(const std::vector<std::string>&);

struct CommandEntry {
  const char* name;
  Command run;
};

constexpr CommandEntry kCommands[] = {
    {"quantize", RunQuantize}, {"dequantize", RunDequantize},
    {"gemm", RunGemm},         {"grouped-gemm", RunGroupedGemm},
    {"bench", RunBench},       {"demo", RunDemo},
    {"train", RunTrain},
};

Command FindCommand(const std::string& name) {
  for (const CommandEntry& c : kCommands) {
    if (name == c.name) return c.run;
  }
  return nullptr;
}

// The overview, then each command's own usage: every flag is documented once, by the
// command that parses it.
int PrintHelp(const std::vector<std::string>& topics) {
  if (topics.empty()) {
    std::fputs(kUsage, stdout);
    for (const CommandEntry& c : kCommands) {
      std::fputs("\n", stdout);
      std::fflush(stdout);
      c.run({"--help"});
    }
    return 0;
  }
  MXTRAIN_CHECK(topics.size() == 1, "'mxtrain help' takes at most one command");
  const Command command = FindCommand(topics[0]);
  MXTRAIN_CHECK(command != nullptr, "unknown command '", topics[0], "' (see mxtrain --help)");
  return command({"--help"});
}

int Main(const std::vector<std::string>& args) {
  MXTRAIN_CHECK(!args.empty(), "missing command (see mxtrain --help)");
  const std::string& name = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (name == "--help" || name == "-h" || name == "help") return PrintHelp(rest);
  if (name == "--version") {
    MXTRAIN_CHECK(rest.empty(), "'mxtrain --version' takes no arguments");
    std::printf("mxtrain %s\n", MXTRAIN_VERSION);
    return 0;
  }
  const Command command = FindCommand(name);
  MXTRAIN_CHECK(command != nullptr, "unknown command '", name,
                "' (expected quantize, dequantize, gemm, grouped-gemm, bench, demo or train; ",
                "see mxtrain --help)");
  return command(rest);
}

}  // namespace
}  // namespace mxtrain::cli

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  // The commands report their own errors; this catches what escapes dispatch itself.
  const int code = mxtrain::cli::RunReportingErrors([&] { return mxtrain::cli::Main(args); });
  if (std::fflush(stdout) != 0 && code == 0) {
    mxtrain::cli::PrintError("cannot write to standard output");
    return 2;
  }
  return code;
}
