// ReadNpy on arbitrary bytes: an Error or a tensor whose bytes match its shape.
#include <cstdlib>
#include <cstring>

#include "fuzz_util.h"
#include "mxtrain/error.h"
#include "mxtrain/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = mxtrain::fuzz::TempPath(".npy");
  mxtrain::fuzz::WriteFile(path, data, size);
  try {
    const mxtrain::Tensor t = mxtrain::ReadNpy(path);
    // The data the reader accepted lies within the file: touch every byte.
    if (t.NumBytes() > size) std::abort();
    unsigned char sum = 0;
    const auto* p = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.NumBytes(); ++i) sum ^= p[i];
    asm volatile("" : : "r"(sum));  // keep the reads
  } catch (const mxtrain::Error&) {
  }
  return 0;
}
