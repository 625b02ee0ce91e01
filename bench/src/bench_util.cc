#include "bench_util.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace mxtrain::internal {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string JsonNumber(std::optional<double> v, bool scientific) {
  if (!v) return "null";
  // JSON has no inf or NaN; a string keeps them apart from null (= not measured).
  if (std::isnan(*v)) return "\"nan\"";
  if (std::isinf(*v)) return "\"inf\"";
  std::ostringstream os;
  if (scientific) {
    os.setf(std::ios::scientific);
    os.precision(2);
  } else {
    os.setf(std::ios::fixed);
    os.precision(4);
  }
  os << *v;
  return os.str();
}

Tensor RandomTensor(Shape shape, uint64_t seed, int threads) {
  Tensor t = Tensor::Empty(DType::kF32, std::move(shape));
  float* p = t.data<float>();
  const int64_t n = t.NumElements();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i);  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) * 0x1p-23f;
  }
  return t;
}

}  // namespace mxtrain::internal
