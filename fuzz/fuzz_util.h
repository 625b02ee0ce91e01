// What the fuzz targets share: the input as a file (the readers take paths) and the one
// failure a reader may report, mxtrain::Error. Anything else (a crash, a sanitizer report,
// another exception escaping) is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mxtrain::fuzz {

// A per-process temporary path with the given suffix (".npy").
inline std::string TempPath(const char* suffix) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/mxtrain_fuzz_" + std::to_string(getpid()) +
         suffix;
}

// Writes data to path (overwriting); aborts when it cannot, which is no finding of ours.
inline void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

}  // namespace mxtrain::fuzz
