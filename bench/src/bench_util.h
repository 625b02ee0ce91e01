// Internal: what every benchmark table shares: medians, JSON numbers and seeded inputs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mxtrain/tensor.h"

namespace mxtrain::internal {

// The median of a non-empty list (the upper one of an even count).
double Median(std::vector<double> v);

// A JSON number with 4 decimals (or 2 significant digits in scientific notation); null
// when absent; "nan" / "inf" as strings, which JSON numbers cannot hold.
std::string JsonNumber(std::optional<double> v, bool scientific = false);

// Uniform values in [-1, 1) from a hash of (seed, index): seeded, and parallel without
// sharing a generator (the layer cases fill hundreds of MB). f32.
Tensor RandomTensor(Shape shape, uint64_t seed, int threads);

}  // namespace mxtrain::internal
