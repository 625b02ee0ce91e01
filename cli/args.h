// The CLI's flag parser (CLI11 underneath) and the small value parsers every subcommand
// shares.
//
// Flags are "--name value" or "--name=value"; everything else is positional, and "--" ends
// the flags. An argument of a single '-' and a letter ("-x") is a short flag, of which
// only "-h" exists (a negative number such as "-1" is a value); write "--out=-x" for such a
// value. Every flag a command accepts is declared up front, so an unknown flag, a flag
// given twice or a flag without its value is an Error naming the flag and the command.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mxtrain/comm.h"

namespace mxtrain::cli {

struct FlagSpec {
  std::string_view name;  // without the dashes: "out"
  bool takes_value = true;
};

class ParsedArgs {
 public:
  // command is the full command for messages ("mxtrain quantize"). "--help" and "-h" are
  // always accepted and set help().
  static ParsedArgs Parse(const std::vector<std::string>& args, std::string_view command,
                          const std::vector<FlagSpec>& flags);

  const std::vector<std::string>& positional() const { return positional_; }
  bool help() const { return help_; }
  bool Has(std::string_view name) const { return values_.count(std::string(name)) > 0; }
  // The flag's value, or fallback when the flag is absent.
  std::string Get(std::string_view name, std::string_view fallback = "") const;
  // The value of a flag the command cannot run without; Error when it is absent.
  std::string Require(std::string_view name) const;
  // Checks that there are exactly `count` positional arguments, described by `what`
  // ("one input file IN.npy").
  void ExpectPositional(size_t count, std::string_view what) const;
  const std::string& command() const { return command_; }

 private:
  std::string command_;
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

// A decimal integer in [min, max]; what names the value in the error ("--threads").
int64_t ParseInt(std::string_view text, std::string_view what, int64_t min, int64_t max);
// "N1,N2,...": comma-separated decimal integers (signs allowed, so that the library can
// name a negative count), at least one.
std::vector<int64_t> ParseIntList(std::string_view text, std::string_view what);

// A finite number > 0 written in full ("3e-3"); what names the value in the error.
double ParsePositiveDouble(std::string_view text, std::string_view what);
// "MxK": two decimal integers in [1, max] joined by 'x' ("4096x1024").
std::pair<int64_t, int64_t> ParseShape2(std::string_view text, std::string_view what, int64_t max);

// Runs body and turns an Error (or any exception) into "mxtrain: error: <message>" on one
// line of stderr and exit code 2.
int RunReportingErrors(const std::function<int()>& body);
// For a command run on several processes: an exception on this rank prints "mxtrain:
// error: rank r of W: <message>" and ends the whole job (Communicator::Abort, exit code 2),
// so that no rank waits for this one in a collective.
int RunAbortingJobOnError(Communicator& world, const std::function<int()>& body);
void PrintError(std::string_view message);
// A name or value kept for one release after a rename: "mxtrain: deprecated: <message>" on
// one line of stderr; the command goes on.
void PrintDeprecation(std::string_view message);

}  // namespace mxtrain::cli
