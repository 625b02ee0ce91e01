// Internal: the AMX tile unit that gemm_bf16.cc's AmxBlock runs on, as a template argument:
// the hardware's (AmxTiles) or a model of it in memory (EmulatedAmxTiles). Only
// gemm_bf16.cc includes this.
#pragma once

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mxtrain/error.h"

#define MXTRAIN_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))

namespace mxtrain::internal {
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Through EmulatedAmxTiles the "amx-bf16-emulated" path (testing.h) runs gemm_bf16.cc's
// AMX driver, packs and microkernel on CPUs without AMX, so that they are tested wherever
// AVX-512BW is. Tile numbers are template arguments: the intrinsics paste them
// into the instruction's text, so each must reach them as a literal (MXTRAIN_TILE_CASES).
// Tiles 0-3: C (fp32 16x16), 4-5: A (bf16 16x32), 6-7: B (bf16 16 pairs x 16 x 2).
#define MXTRAIN_TILE_CASES(t, OP)      \
  if constexpr ((t) == 0) {            \
    OP(0);                             \
  } else if constexpr ((t) == 1) {     \
    OP(1);                             \
  } else if constexpr ((t) == 2) {     \
    OP(2);                             \
  } else if constexpr ((t) == 3) {     \
    OP(3);                             \
  } else if constexpr ((t) == 4) {     \
    OP(4);                             \
  } else if constexpr ((t) == 5) {     \
    OP(5);                             \
  } else if constexpr ((t) == 6) {     \
    OP(6);                             \
  } else {                             \
    static_assert((t) == 7, "tile 7"); \
    OP(7);                             \
  }

struct AmxTiles {
  // Every tile 16 rows of 64 bytes.
  MXTRAIN_AMX static void Configure() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
      cfg.colsb[t] = 64;
      cfg.rows[t] = 16;
    }
    // Inline ldtilecfg on the whole 64-byte struct: GCC 12's _tile_loadconfig is declared as
    // reading 8 bytes, so at -O2 the stores that fill the struct can be dropped.
    asm volatile("ldtilecfg %0" : : "m"(cfg));
  }
  MXTRAIN_AMX static void Release() { _tile_release(); }
  template <int kT>
  MXTRAIN_AMX static void Zero() {
#define MXTRAIN_OP(n) _tile_zero(n)
    MXTRAIN_TILE_CASES(kT, MXTRAIN_OP)
#undef MXTRAIN_OP
  }
  template <int kT>
  MXTRAIN_AMX static void Load(const void* base, int64_t stride) {
#define MXTRAIN_OP(n) _tile_loadd(n, base, stride)
    MXTRAIN_TILE_CASES(kT, MXTRAIN_OP)
#undef MXTRAIN_OP
  }
  template <int kT>
  MXTRAIN_AMX static void Store(void* base, int64_t stride) {
#define MXTRAIN_OP(n) _tile_stored(n, base, stride)
    MXTRAIN_TILE_CASES(kT, MXTRAIN_OP)
#undef MXTRAIN_OP
  }
  // C tile kC += A tile kA . B tile kB (TDPBF16PS); AmxBlock's four combinations.
  template <int kC, int kA, int kB>
  MXTRAIN_AMX static void DotBf16() {
    if constexpr (kC == 0 && kA == 4 && kB == 6) {
      _tile_dpbf16ps(0, 4, 6);
    } else if constexpr (kC == 1 && kA == 4 && kB == 7) {
      _tile_dpbf16ps(1, 4, 7);
    } else if constexpr (kC == 2 && kA == 5 && kB == 6) {
      _tile_dpbf16ps(2, 5, 6);
    } else {
      static_assert(kC == 3 && kA == 5 && kB == 7, "a tile combination AmxBlock does not use");
      _tile_dpbf16ps(3, 5, 7);
    }
  }
};

// AmxTiles' operations as the Intel SDM's pseudo-code describes them, on eight 1 KiB tiles
// in memory (one set per thread), for the 16-row, 64-byte tiles that AmxTiles::Configure
// sets up. TDPBF16PS: for each row m of C and pair k of A's row, C[m][n] += A[m][2k] *
// B[k][2n], then += A[m][2k + 1] * B[k][2n + 1], in fp32 rounded to nearest even, with
// subnormal inputs read as zero and subnormal results flushed (it ignores the MXCSR). The
// operands the AMX path is given (exact-safe, operand.h) meet neither. Each use of a tile
// outside Configure .. Release fails a check, as it would fault on the hardware.
class EmulatedAmxTiles {
 public:
  static void Configure() { State().configured = true; }
  static void Release() { State().configured = false; }
  template <int kT>
  static void Zero() {
    std::memset(Tile(kT), 0, kTileBytes);
  }
  template <int kT>
  static void Load(const void* base, int64_t stride) {
    for (int r = 0; r < kRows; ++r) {
      std::memcpy(Tile(kT) + r * kRowBytes, static_cast<const char*>(base) + r * stride, kRowBytes);
    }
  }
  template <int kT>
  static void Store(void* base, int64_t stride) {
    for (int r = 0; r < kRows; ++r) {
      std::memcpy(static_cast<char*>(base) + r * stride, Tile(kT) + r * kRowBytes, kRowBytes);
    }
  }
  template <int kC, int kA, int kB>
  static void DotBf16() {
    static_assert(kC != kA && kC != kB);
    float c[kRows][16];
    uint16_t a[kRows][32], b[kRows][32];
    std::memcpy(c, Tile(kC), kTileBytes);
    std::memcpy(a, Tile(kA), kTileBytes);
    std::memcpy(b, Tile(kB), kTileBytes);
    for (int m = 0; m < kRows; ++m) {
      for (int k = 0; k < 16; ++k) {
        for (int n = 0; n < 16; ++n) {
          c[m][n] = Flushed(c[m][n] + Flushed(Daz(a[m][2 * k]) * Daz(b[k][2 * n])));
          c[m][n] = Flushed(c[m][n] + Flushed(Daz(a[m][2 * k + 1]) * Daz(b[k][2 * n + 1])));
        }
      }
    }
    std::memcpy(Tile(kC), c, kTileBytes);
  }

 private:
  static constexpr int kRows = 16, kRowBytes = 64, kTileBytes = kRows * kRowBytes;
  struct Tiles {
    alignas(64) char bytes[8][kTileBytes];
    bool configured = false;
  };
  static Tiles& State() {
    thread_local Tiles tiles;
    return tiles;
  }
  static char* Tile(int t) {
    MXTRAIN_CHECK(State().configured, "AMX emulation: tile ", t, " used without a configuration");
    return State().bytes[t];
  }
  static float Daz(uint16_t bf16) {
    const uint32_t bits = (bf16 & 0x7F80) == 0 ? (bf16 & 0x8000u) << 16 : uint32_t{bf16} << 16;
    return std::bit_cast<float>(bits);
  }
  static float Flushed(float x) {
    return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
  }
};

}  // namespace mxtrain::internal
