// The mxtrain subcommands. Each parses its own arguments (args[0] is the first argument
// after the subcommand name), calls the library and returns the process exit code:
// 0 on success, 2 for bad input (one line on stderr, nothing written).
#pragma once

#include <string>
#include <vector>

namespace mxtrain::cli {

int RunQuantize(const std::vector<std::string>& args);
int RunDequantize(const std::vector<std::string>& args);
int RunGemm(const std::vector<std::string>& args);
int RunGroupedGemm(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);
int RunDemo(const std::vector<std::string>& args);
int RunTrain(const std::vector<std::string>& args);

// For the commands with a --path flag (gemm, grouped-gemm, bench gemm; cmd_gemm.cc): the
// GEMM paths of this machine, best first, comma-separated (AvailableGemmPaths), and the
// flag's forcing: one of those paths (the emulated AMX path that tests may force,
// testing.h, is not a user's choice), or an Error that lists them.
std::string JoinedGemmPaths();
void ForceGemmPathFlag(const std::string& path);

}  // namespace mxtrain::cli
