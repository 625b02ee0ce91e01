// NumPy .npy files: reading one into a Tensor and writing a set of tensors atomically. The
// exchange format of the CLI and of Python users (np.load / np.save read and write the same
// bytes).
//
// Supported: format versions 1.0, 2.0 and 3.0; C order; little-endian element types
//   '<f4'          <-> DType::kF32
//   '<u2'          <-> DType::kBF16 (bf16 bit patterns; NumPy has no bfloat16 type)
//   '|u1' ('<u1')  <-> DType::kU8   (MX data and E8M0 scales)
// Anything else (another dtype, big-endian, Fortran order, a structured dtype) is rejected
// with an Error rather than converted, so a file is never silently reinterpreted.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mxtrain/tensor.h"

namespace mxtrain {

// Reads a whole .npy file. Shapes of any rank are returned as stored (including 0-d and
// 1-d); callers check the rank they need. The data must be exactly as long as the shape
// implies: a truncated file, and one with bytes after the data, are both errors (either
// means the header does not describe the file). Throws Error with one sentence naming the
// path and the problem.
Tensor ReadNpy(const std::string& path, MemoryCategory category = MemoryCategory::kActivation);

// Writes each tensor to its path as a set: every file first goes to a temporary file
// "<path>.tmp.<random>" in the same directory; only when all of them are complete are
// they renamed over their paths. On failure every temporary is removed and Error names the
// path ("cannot write 'x/y.npy': No such file or directory"), and no path is touched.
// Headers are version 1.0 (2.0 when longer than 65535 bytes), padded with spaces so that
// the data starts at a multiple of 64 bytes. Paths must be distinct; tensors defined.
//
// The one window where a set can end up mixed is a rename failing after an earlier rename
// of the same call succeeded; within one directory, with each target checked beforehand
// not to be a directory, that takes something like a concurrent change of permissions.
void WriteNpyFiles(const std::vector<std::pair<std::string, const Tensor*>>& files);

// WriteNpyFiles of a single file.
void WriteNpy(const std::string& path, const Tensor& tensor);

// The .npy dtype string for a tensor type: "<f4", "<u2" or "|u1".
std::string_view NpyDescr(DType dtype);

}  // namespace mxtrain
