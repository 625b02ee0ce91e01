#include "args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "mxtrain/error.h"

namespace mxtrain::cli {
namespace {

// What CLI11 stores for a value flag given without its value ("--out" last, or followed
// by another flag): distinct from an explicit empty value, which is a different error.
constexpr char kNoValue[] = "\x01(no value)";

// A whole decimal integer that fits int64_t, with an optional sign.
bool ToInt64(std::string_view text, int64_t* v) {
  // from_chars rejects a leading '+'; allowed here since "+3" is an unambiguous integer.
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  if (text.empty() || text[0] == '+') return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *v);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

ParsedArgs ParsedArgs::Parse(const std::vector<std::string>& args, std::string_view command,
                             const std::vector<FlagSpec>& flags) {
  ParsedArgs parsed;
  parsed.command_ = std::string(command);
  // Long flags are checked here, from the left, before CLI11 sees them: an unknown one is
  // named with the command; "--flag=value" of a flag without a value is an error (CLI11
  // would read "--flag=true" as a boolean); and "--name=" stays an explicit empty value
  // (CLI11 would drop it and take the next argument as the value).
  // "--" ends the flags: what follows is positional, after what CLI11 finds before it.
  const auto flags_end = std::find(args.begin(), args.end(), "--");
  std::vector<std::string> words;
  for (auto it = args.begin(); it != flags_end; ++it) {
    const std::string& arg = *it;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0) {
      words.push_back(arg);
      continue;
    }
    const std::string name = arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    if (name == "help") {
      words.push_back("--help");
      continue;
    }
    const auto spec =
        std::find_if(flags.begin(), flags.end(), [&](const FlagSpec& f) { return f.name == name; });
    MXTRAIN_CHECK(spec != flags.end(), "unknown flag '--", name, "' for '", command, "'");
    MXTRAIN_CHECK(spec->takes_value || eq == std::string::npos, "flag '--", name, "' of '", command,
                  "' takes no value");
    const bool empty_value = eq + 1 == arg.size();
    words.push_back(empty_value ? arg.substr(0, eq) : arg);
    if (empty_value) words.emplace_back();
  }

  CLI::App app{std::string(command)};
  app.set_help_flag();  // help is a flag like any other; the command prints its usage
  app.add_flag("-h,--help", parsed.help_);
  app.allow_extras();  // unknown short flags ("-x") are reported below, naming the command
  app.add_option("positional", parsed.positional_);
  for (const FlagSpec& f : flags) {
    const std::string name = "--" + std::string(f.name);
    // Every occurrence kept (TakeAll), so that a flag given twice is an error, not the last;
    // a value is optional to CLI11 (expected 0..1), so that "--out --format e5m2" leaves
    // --out without one instead of taking "--format" as its value.
    CLI::Option* opt = f.takes_value ? app.add_option(name)->expected(0, 1)->default_str(kNoValue)
                                     : app.add_flag(name);
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  try {
    std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 pops the back
    app.parse(reversed);
  } catch (const CLI::Error& e) {
    Fail("cannot parse the arguments of '", command, "': ", e.what());
  }
  if (flags_end != args.end())
    parsed.positional_.insert(parsed.positional_.end(), flags_end + 1, args.end());
  for (const std::string& extra : app.remaining()) {
    Fail("unknown flag '", extra.substr(0, extra.find('=')), "' for '", command, "'");
  }
  // One entry per occurrence, in the order given: the first problem from the left.
  for (const CLI::Option* opt : app.parse_order()) {
    if (opt->get_name().rfind("--", 0) != 0 || opt->get_name() == "--help") continue;
    const std::string name = opt->get_name().substr(2);
    MXTRAIN_CHECK(parsed.values_.count(name) == 0, "flag '--", name, "' given twice for '", command,
                  "'");
    const bool takes_value = opt->get_items_expected_max() > 0;
    const std::string value = takes_value ? opt->results().front() : std::string();
    MXTRAIN_CHECK(value != kNoValue, "flag '--", name, "' of '", command, "' needs a value");
    MXTRAIN_CHECK(!takes_value || !value.empty(), "flag '--", name, "' of '", command,
                  "' has an empty value");
    parsed.values_[name] = value;
  }
  return parsed;
}

std::string ParsedArgs::Get(std::string_view name, std::string_view fallback) const {
  const auto it = values_.find(std::string(name));
  return it == values_.end() ? std::string(fallback) : it->second;
}

std::string ParsedArgs::Require(std::string_view name) const {
  MXTRAIN_CHECK(Has(name), "'", command_, "' needs --", name);
  return Get(name);
}

void ParsedArgs::ExpectPositional(size_t count, std::string_view what) const {
  if (positional_.size() == count) return;
  if (positional_.size() < count) Fail("'", command_, "' needs ", what);
  Fail("'", command_, "' takes ", what, ", got unexpected argument '", positional_[count], "'");
}

int64_t ParseInt(std::string_view text, std::string_view what, int64_t min, int64_t max) {
  int64_t v = 0;
  MXTRAIN_CHECK(ToInt64(text, &v), what, " value '", text, "' is not an integer");
  MXTRAIN_CHECK(v >= min && v <= max, what, " value ", v, " is out of range [", min, ", ", max,
                "]");
  return v;
}

std::vector<int64_t> ParseIntList(std::string_view text, std::string_view what) {
  std::vector<int64_t> values;
  for (std::string_view entry : SplitList(text, what)) {
    int64_t v = 0;
    MXTRAIN_CHECK(ToInt64(entry, &v), what, " entry '", entry, "' is not an integer");
    values.push_back(v);
  }
  return values;
}

double ParsePositiveDouble(std::string_view text, std::string_view what) {
  const std::string s(text);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  MXTRAIN_CHECK(used == s.size() && std::isfinite(v) && v > 0, what, " value '", text,
                "' is not a positive number");
  return v;
}

std::pair<int64_t, int64_t> ParseShape2(std::string_view text, std::string_view what, int64_t max) {
  const size_t x = text.find('x');
  MXTRAIN_CHECK(x != std::string_view::npos, what, " must look like 4096x4096, got '", text, "'");
  return {ParseInt(text.substr(0, x), what, 1, max), ParseInt(text.substr(x + 1), what, 1, max)};
}

namespace {

// One line whatever the message holds (a path may contain a newline).
void PrintLine(std::string_view head, std::string_view message) {
  std::string line(head);
  for (char c : message) line += (c == '\n' || c == '\r') ? ' ' : c;
  line += '\n';
  std::fflush(stdout);
  std::fputs(line.c_str(), stderr);
}

}  // namespace

void PrintError(std::string_view message) { PrintLine("mxtrain: error: ", message); }

void PrintDeprecation(std::string_view message) { PrintLine("mxtrain: deprecated: ", message); }

int RunReportingErrors(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    PrintError("out of memory");
  } catch (const std::exception& e) {
    PrintError(e.what());
  }
  return 2;
}

int RunAbortingJobOnError(Communicator& world, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    PrintError(StrCat("rank ", world.rank(), " of ", world.size(), ": ", e.what()));
    std::fflush(stderr);
    world.Abort(2);
  }
  return 2;  // not reached: Abort ends the process
}

}  // namespace mxtrain::cli
