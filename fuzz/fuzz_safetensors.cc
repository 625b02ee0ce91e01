// ReadSafetensors and the checkpoint loader on arbitrary bytes: an Error, or tensors that
// fit the file, and a checkpoint state with every parameter in its shape.
#include <cstdlib>

#include "fuzz_util.h"
#include "mxtrain/error.h"
#include "mxtrain/safetensors.h"
#include "seed_model.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = mxtrain::fuzz::TempPath(".safetensors");
  mxtrain::fuzz::WriteFile(path, data, size);
  try {
    const mxtrain::SafetensorsFile f = mxtrain::ReadSafetensors(path);
    size_t bytes = 0;
    for (const auto& t : f.tensors) bytes += t.tensor.NumBytes();
    if (bytes > size) std::abort();
  } catch (const mxtrain::Error&) {
  }
  try {
    const auto s = mxtrain::internal::ReadCheckpoint(path, mxtrain::fuzz::SeedConfig(),
                                                     mxtrain::fuzz::SeedParams());
    if (s.params.size() != mxtrain::fuzz::SeedParams().size()) std::abort();
    for (size_t i = 0; i < s.params.size(); ++i) {
      if (!(s.params[i].shape() == mxtrain::fuzz::SeedParams()[i].shape)) std::abort();
    }
  } catch (const mxtrain::Error&) {
  }
  return 0;
}
