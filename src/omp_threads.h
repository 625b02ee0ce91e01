// Internal: the team size of a `threads` option, a thread's share of a range, and the
// calling thread's OpenMP thread count set for a scope. oneDNN's OpenMP
// runtime sizes its parallel regions by omp_get_max_threads() of the calling thread, both
// when it creates a primitive (the blocking it picks depends on the thread count) and when
// it runs one.
#pragma once

#include <omp.h>

#include <cstdint>

#include "mxtrain/error.h"

namespace mxtrain::internal {

// The team size of a public function's `threads` option: 0 means all cores; a negative
// count is an error naming `op`, not a silent "all cores".
inline int TeamSize(int threads, const char* op) {
  MXTRAIN_CHECK(threads >= 0, op, ": threads must be >= 0 (0: all cores), got ", threads);
  return threads > 0 ? threads : omp_get_max_threads();
}

// The calling thread's share [begin, end) of [0, n) inside a parallel region: a static split
// over the team there is (which can be smaller than asked for: a nested region,
// OMP_THREAD_LIMIT), so the shares cover [0, n) once, in thread order.
struct ThreadShare {
  int64_t begin, end;
  explicit ThreadShare(int64_t n) {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    begin = n * t / team;
    end = n * (t + 1) / team;
  }
};

class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace mxtrain::internal
