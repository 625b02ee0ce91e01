// mxtrain::Error and the checks that raise it.
//
// Public functions validate their arguments and throw Error with one sentence naming the
// offending values (DESIGN.md "Errors"); hot loops use MXTRAIN_DCHECK, which compiles
// away in release builds.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

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
