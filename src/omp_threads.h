// Internal: sets the calling thread's OpenMP thread count for a scope. oneDNN's OpenMP
// runtime sizes its parallel regions by omp_get_max_threads() of the calling thread, both
// when it creates a primitive (the blocking it picks depends on the thread count) and when
// it runs one.
#pragma once

#include <omp.h>

namespace mxtrain::internal {

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
