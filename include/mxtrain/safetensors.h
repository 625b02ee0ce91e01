// safetensors files (https://github.com/huggingface/safetensors): named tensors with string
// metadata, the checkpoint format of `mxtrain train` that PyTorch / JAX users load with
// safetensors.torch.load_file and friends.
//
// Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces so that N is a multiple of 8, then the byte buffer; offsets count from
// the start of the buffer, and the tensors fill it without holes or overlaps.
// Supported dtypes: "F32" <-> DType::kF32, "BF16" <-> DType::kBF16, "U8" <-> DType::kU8.
// Any other dtype is rejected with an Error rather than converted.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mxtrain/tensor.h"

namespace mxtrain {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Writes the tensors in the given order (header keys and data both), with "__metadata__"
// first when metadata is not empty. Atomic: the file is written to "<path>.tmp.<random>" in
// the same directory, fsynced and renamed over path; on failure the temporary is removed,
// nothing is left and an existing file is untouched. Throws Error for an undefined tensor,
// an empty, duplicate or "__metadata__" name, a name or metadata string that is not UTF-8,
// and for any failure to write ("cannot write '<path>': <reason>").
void WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in the order of their data in the file
  std::map<std::string, std::string> metadata;
};

// Reads a whole file and validates everything before trusting it: the header length against
// the file size (and at most 100 MB, like the reference reader), the JSON syntax, that the
// header is an object of tensor entries with exactly the keys dtype, shape and data_offsets
// plus an optional "__metadata__" of strings, known dtypes, non-negative shapes (rank 0 is a
// scalar of one element), shape x dtype size == the offsets' span, offsets that tile the
// buffer from 0 to its end without holes or overlaps, and no duplicate names. Throws Error
// "<path>: <problem>" on any violation; corrupt input never crashes or over-allocates.
// Tensors are allocated as MemoryCategory::kActivation.
SafetensorsFile ReadSafetensors(const std::string& path);

// The safetensors dtype string: "F32", "BF16" or "U8".
std::string_view SafetensorsDType(DType dtype);

}  // namespace mxtrain
