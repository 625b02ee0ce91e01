// The tracking allocator (memory.h): quantized copies counted under their category, freed
// large buffers cached for reuse and reported apart from live bytes, and the size classes
// the cache serves.
#include "mxtrain/memory.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "mxtrain/quantize.h"
#include "mxtrain/tensor.h"

namespace mxtrain {
namespace {

TEST(Memory, QuantizedCopiesAreCounted) {
  const Tensor x = Tensor::Zeros(DType::kF32, {96, 64});
  const int64_t before =
      ReadMemory().by_category[static_cast<int>(MemoryCategory::kQuantized)].live_bytes;
  {
    const DualMx q = QuantizeDual(x, {});
    const int64_t after =
        ReadMemory().by_category[static_cast<int>(MemoryCategory::kQuantized)].live_bytes;
    // Two FP8 copies (M*K each) plus rowwise scales M*ceil(K/32) and columnwise ceil(M/32)*K.
    EXPECT_EQ(after - before, 2 * 96 * 64 + 96 * 2 + 3 * 64);
  }
  EXPECT_EQ(ReadMemory().by_category[static_cast<int>(MemoryCategory::kQuantized)].live_bytes,
            before);
}

TEST(Memory, FreedLargeBuffersAreCachedNotCounted) {
  SetMemoryCacheLimit(int64_t{64} << 20);
  ReleaseCachedMemory();
  const int64_t live_before = ReadMemory().total.live_bytes;
  {
    const Tensor t = Tensor::Empty(DType::kU8, {1 << 20});
    EXPECT_EQ(ReadMemory().total.live_bytes - live_before, 1 << 20);
  }
  // Freed: no longer live, but kept for the next request of the same size.
  EXPECT_EQ(ReadMemory().total.live_bytes, live_before);
  EXPECT_EQ(ReadMemory().cached_bytes, 1 << 20);
  const void* first = nullptr;
  {
    const Tensor t = Tensor::Empty(DType::kU8, {1 << 20});
    first = t.raw();
    EXPECT_EQ(ReadMemory().cached_bytes, 0);
  }
  {
    const Tensor t = Tensor::Empty(DType::kU8, {1 << 20});
    EXPECT_EQ(t.raw(), first);  // the cached buffer came back
  }
  SetMemoryCacheLimit(0);
  EXPECT_EQ(ReadMemory().cached_bytes, 0);
  SetMemoryCacheLimit(int64_t{1} << 30);
}

// Sizes within one class (an eighth of the power of two above 1 MiB: 128 KiB) share a
// cached buffer; live bytes count what was asked for, the cache what was allocated.
TEST(Memory, CachedBuffersServeRequestsOfTheirSizeClass) {
  SetMemoryCacheLimit(int64_t{64} << 20);
  ReleaseCachedMemory();
  const int64_t live_before = ReadMemory().total.live_bytes;
  const void* first = nullptr;
  {
    const Tensor t = Tensor::Empty(DType::kU8, {(1 << 20) + 100000});
    first = t.raw();
    EXPECT_EQ(ReadMemory().total.live_bytes - live_before, (1 << 20) + 100000);
  }
  EXPECT_EQ(ReadMemory().cached_bytes, (1 << 20) + (128 << 10));
  {
    const Tensor t = Tensor::Empty(DType::kU8, {(1 << 20) + 70000});  // same class
    EXPECT_EQ(t.raw(), first);
    EXPECT_EQ(ReadMemory().cached_bytes, 0);
    EXPECT_EQ(ReadMemory().total.live_bytes - live_before, (1 << 20) + 70000);
  }
  {
    const Tensor t = Tensor::Empty(DType::kU8, {(1 << 20) + 140000});  // the next class
    EXPECT_EQ(ReadMemory().cached_bytes, (1 << 20) + (128 << 10));
  }
  EXPECT_EQ(ReadMemory().cached_bytes, 2 * (1 << 20) + (128 << 10) + (256 << 10));
  SetMemoryCacheLimit(int64_t{1} << 30);
  ReleaseCachedMemory();
}

// From 64 KiB on (below, the malloc heap): the newest buffer of a size comes back first,
// and the limit evicts the oldest buffers, whatever their size.
TEST(Memory, CacheReturnsTheNewestOfASizeAndEvictsTheOldest) {
  SetMemoryCacheLimit(int64_t{64} << 20);
  ReleaseCachedMemory();
  { const Tensor small = Tensor::Empty(DType::kU8, {(64 << 10) - 64}); }
  EXPECT_EQ(ReadMemory().cached_bytes, 0);  // below the cache
  const int64_t kA = 64 << 10, kB = 96 << 10;
  const void* newest = nullptr;
  {
    Tensor first = Tensor::Empty(DType::kU8, {kA});
    Tensor second = Tensor::Empty(DType::kU8, {kA});
    newest = second.raw();
    first = Tensor();   // freed first: the older of the two
    second = Tensor();  // freed last
  }
  EXPECT_EQ(ReadMemory().cached_bytes, 2 * kA);
  {
    const Tensor t = Tensor::Empty(DType::kU8, {kA});
    EXPECT_EQ(t.raw(), newest);
    EXPECT_EQ(ReadMemory().cached_bytes, kA);
  }
  // Cached now, oldest first: A (the older one), A (just freed). Under a limit of A + 2 B,
  // caching two Bs after an A evicts the oldest A only.
  SetMemoryCacheLimit(kA + 2 * kB);
  {
    const Tensor b = Tensor::Empty(DType::kU8, {kB});
    const Tensor b2 = Tensor::Empty(DType::kU8, {kB});
    const Tensor a = Tensor::Empty(DType::kU8, {kA});  // takes the newest A
    EXPECT_EQ(ReadMemory().cached_bytes, kA);
  }
  // Freed in reverse order of declaration: a (2 A cached), b2 (2 A + B), b (the oldest A
  // evicted).
  EXPECT_EQ(ReadMemory().cached_bytes, kA + 2 * kB);
  {
    const Tensor a = Tensor::Empty(DType::kU8, {kA});
    EXPECT_EQ(ReadMemory().cached_bytes, 2 * kB);
    const Tensor another = Tensor::Empty(DType::kU8, {kA});
    EXPECT_EQ(ReadMemory().cached_bytes, 2 * kB);  // no second A was left
  }
  SetMemoryCacheLimit(int64_t{1} << 30);
  ReleaseCachedMemory();
}

}  // namespace
}  // namespace mxtrain
