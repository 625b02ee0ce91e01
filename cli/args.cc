#include "args.h"

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

const FlagSpec* FindFlag(const std::vector<FlagSpec>& flags, std::string_view name) {
  for (const FlagSpec& f : flags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

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
  bool flags_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_ended || arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      if (!flags_ended && arg == "-h") {
        parsed.help_ = true;
      } else {
        parsed.positional_.push_back(arg);
      }
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (name == "help") {
      parsed.help_ = true;
      continue;
    }
    const FlagSpec* spec = FindFlag(flags, name);
    MXTRAIN_CHECK(spec != nullptr, "unknown flag '--", name, "' for '", command, "'");
    MXTRAIN_CHECK(!parsed.Has(name), "flag '--", name, "' given twice for '", command, "'");
    std::string value;
    if (!spec->takes_value) {
      MXTRAIN_CHECK(eq == std::string::npos, "flag '--", name, "' of '", command,
                    "' takes no value");
    } else if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      // A following "--flag" is taken as a forgotten value, not as the value itself.
      MXTRAIN_CHECK(i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0, "flag '--", name,
                    "' of '", command, "' needs a value");
      value = args[++i];
    }
    MXTRAIN_CHECK(!spec->takes_value || !value.empty(), "flag '--", name, "' of '", command,
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
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    std::string_view entry = text.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    MXTRAIN_CHECK(!entry.empty(), what, " '", text, "' has an empty entry");
    int64_t v = 0;
    MXTRAIN_CHECK(ToInt64(entry, &v), what, " entry '", entry, "' is not an integer");
    values.push_back(v);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
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

void PrintError(std::string_view message) {
  // One line whatever the message holds (a path may contain a newline).
  std::string line = "mxtrain: error: ";
  for (char c : message) line += (c == '\n' || c == '\r') ? ' ' : c;
  line += '\n';
  std::fflush(stdout);
  std::fputs(line.c_str(), stderr);
}

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

}  // namespace mxtrain::cli
