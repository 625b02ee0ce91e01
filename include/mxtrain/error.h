// mxtrain::Error and the checks that raise it.
//
// Public functions validate their arguments and throw Error with one sentence naming the
// offending values (DESIGN.md "Errors"); hot loops use MXTRAIN_DCHECK, which compiles
// away in release builds.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mxtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Concatenates the arguments with operator<< into one message.
template <typename... Args>
std::string StrCat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// Throws Error(StrCat(args...)).
template <typename... Args>
[[noreturn]] void Fail(Args&&... args) {
  throw Error(StrCat(std::forward<Args>(args)...));
}

// The entries of a comma-separated list (an option's value), each with the spaces around
// it trimmed; throws Error naming `what` and the list if an entry is empty. The views
// point into `text`.
inline std::vector<std::string_view> SplitList(std::string_view text, std::string_view what) {
  std::vector<std::string_view> entries;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    std::string_view entry = text.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.empty()) Fail(what, " '", text, "' has an empty entry");
    entries.push_back(entry);
    if (comma == std::string_view::npos) return entries;
    begin = comma + 1;
  }
}

}  // namespace mxtrain

// MXTRAIN_CHECK(cond, parts...): throws mxtrain::Error built from parts when cond is false.
#define MXTRAIN_CHECK(cond, ...)               \
  do {                                         \
    if (!(cond)) ::mxtrain::Fail(__VA_ARGS__); \
  } while (0)

// MXTRAIN_DCHECK(cond): in debug builds (the dev preset) aborts with the file, line and
// condition when cond is false; in release builds (NDEBUG) does nothing and evaluates
// nothing (cond stays an unevaluated operand, so what it names counts as used). For
// preconditions inside the library: kernel entry points, hot loops.
#ifdef NDEBUG
#define MXTRAIN_DCHECK(cond)      \
  do {                            \
    (void)sizeof((cond) ? 1 : 0); \
  } while (0)
#else
#include <cstdio>
#include <cstdlib>
#define MXTRAIN_DCHECK(cond)                                                              \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: debug check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
#endif
