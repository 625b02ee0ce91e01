// The bf16 GEMM paths: AMX-BF16 (TDPBF16PS) and AVX512-BF16 (VDPBF16PS).
//
// Each operand is decoded once into bf16 tiles with its block scales folded in (exact for
// the exact-safe rows these paths are given), A as 16x32 row tiles and B in the pair-
// interleaved ("VNNI") layout that both TDPBF16PS and VDPBF16PS read; then 32x32 blocks of C
// accumulate, 32 along K per step (one MX block per tile row): in four tile registers on
// AMX, or as four strips of 8 rows x 32 columns in 16 zmm accumulators on AVX512-BF16 (an
// A pair broadcast against a row of B pairs per instruction). Blocking, shared by both: a thread
// owns a column item of C at a time, as many 32-column panels as 1 MiB of their B tiles
// holds for a K chunk of up to 2048 (at least 2 panels), and sweeps its 32-row panels of A
// past them; C is loaded and stored once per chunk, and with threads splitting the rows
// every item takes a chunk before any takes the next, so that a chunk of A stays in L3.
// Long chunks matter more than wide items here: every C switch drains the tile pipeline
// (docs/decisions.md, "AMX blocking").
//
// Written with intrinsics rather than Highway: Highway 1.0.3 has no AMX tile operations and
// no VDPBF16PS (its bf16 ReorderWidenMulAccumulate widens to fp32 and multiplies there), and
// the packing around them only ever runs where AVX-512BW is present, so this file is
// compiled for exactly that ISA with target attributes (below) instead of once per Highway
// target; the driver calls it only where the CPU has the units (gemm/amx.h). The decode,
// the transposes, the stores and the two microkernels are each one small named function.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "convert.h"
#include "fp_env.h"
#include "gemm/amx_tiles.h"
#include "gemm/kernels.h"
#include "mxtrain/error.h"
#include "mxtrain/format/bits.h"
#include "mxtrain/tensor.h"
#include "omp_threads.h"

#define MXTRAIN_AVX512 __attribute__((target("avx512f,avx512bw")))
#define MXTRAIN_DPBF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace mxtrain::internal {
namespace {

constexpr int64_t kBlockDim = 32;        // C block edge: 2x2 tiles of 16x16
constexpr int64_t kTileElems = 16 * 32;  // bf16 elements per A or B tile (1 KiB)
constexpr int64_t kChunkBlocks = 64;     // K blocks (of 32) per pass over C: 2048 K
// B tiles a thread keeps in L2 for one work item (of its 2 MiB): the item is as many
// 32-column panels as fit, at least 2, so that each pass of A over them does more work.
constexpr int64_t kBudgetBytes = 1 << 20;
// Packs of at most this much a thread (its rows of A, and all of B) are written inside the
// compute region with ordinary stores (RunBf16Gemm); larger ones first, streamed.
constexpr int64_t kInRegionBytes = 1 << 20;

// bf16 bits of every element code, unscaled (E4M3 and E5M2 values are normal in bf16).
// `finite_max`: the largest magnitude code of a finite value (E4M3 0x7E, E5M2 0x7B).
struct Bf16Table {
  alignas(64) std::array<uint16_t, 256> bits;  // the magnitudes 0..127 first: DecodeBf16x32
  uint16_t finite_max;
  explicit Bf16Table(ElementFormat f) : finite_max(f == ElementFormat::kE4M3 ? 0x7E : 0x7B) {
    for (int c = 0; c < 256; ++c) bits[c] = F32ToBf16(DecodeElement(f, static_cast<uint8_t>(c)));
  }
};

// The table of format f, built once: building one takes about a microsecond (256 scalar
// decodes), 40% of a 32 x 32 x 32 GEMM's time when each call built its two.
const Bf16Table& Bf16TableOf(ElementFormat f) {
  static const Bf16Table e4m3(ElementFormat::kE4M3), e5m2(ElementFormat::kE5M2);
  return f == ElementFormat::kE4M3 ? e4m3 : e5m2;
}

// bf16 of element `code` times 2^(scale - 127): the scale is added to the exponent field,
// exact while the result stays normal (the exact-safe rows this path computes).
inline uint16_t DecodeBf16(const Bf16Table& t, ElementFormat f, uint8_t code, uint8_t scale) {
  const uint16_t bits = t.bits[code];
  const uint8_t mag = code & 0x7F;
  const bool nonfinite = f == ElementFormat::kE4M3 ? mag == 0x7F : mag >= 0x7C;
  if (mag == 0 || nonfinite) return bits;
  return static_cast<uint16_t>(bits + ((static_cast<int>(scale) - 127) << 7));
}

// 32 codes -> 32 bf16 with per-lane exponent offsets ((scale - 127) << 7), the vector form of
// DecodeBf16: each magnitude looked up in the table's first 128 entries t0..t3 (two two-
// register word permutes and a select on bit 6: zero, subnormals, Inf and NaN included), the
// offset added to finite nonzero ones, the sign put back.
MXTRAIN_AVX512 inline __m512i DecodeBf16x32(__m512i t0, __m512i t1, __m512i t2, __m512i t3,
                                            __m512i finite_max, __m256i codes, __m512i offsets) {
  const __m512i w = _mm512_cvtepu8_epi16(codes);
  const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7F));
  const __m512i lo = _mm512_permutex2var_epi16(t0, mag, t1);
  const __m512i hi = _mm512_permutex2var_epi16(t2, mag, t3);
  const __mmask32 upper = _mm512_test_epi16_mask(mag, _mm512_set1_epi16(0x40));
  __m512i v = _mm512_mask_blend_epi16(upper, lo, hi);
  // Finite nonzero: mag - 1 below finite_max (zero wraps around to 0xFFFF).
  const __mmask32 scaled =
      _mm512_cmplt_epu16_mask(_mm512_sub_epi16(mag, _mm512_set1_epi16(1)), finite_max);
  v = _mm512_mask_add_epi16(v, scaled, v, offsets);
  // v | (w << 8 & 0x8000): the code's sign bit onto the bf16's.
  const __m512i sign_bit = _mm512_set1_epi16(static_cast<int16_t>(0x8000));
  return _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(w, 8), sign_bit, 0xF8);
}

MXTRAIN_AVX512 inline __m512i BroadcastOffset(uint8_t scale) {
  return _mm512_set1_epi16(static_cast<int16_t>((static_cast<int>(scale) - 127) << 7));
}

// Offsets for 32 consecutive scale bytes (columnwise storage: one scale per column).
MXTRAIN_AVX512 inline __m512i OffsetsOf(const uint8_t* scales) {
  const __m512i b =
      _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
  return _mm512_slli_epi16(_mm512_sub_epi16(b, _mm512_set1_epi16(127)), 7);
}

// DecodeBf16x32 with the table's four vectors in registers: packing loops store through
// pointers that may alias the table, so the compiler would reload it for every 32 codes.
// Each packing function makes its own (a local whose address never escapes stays in
// registers; one passed by reference would be reloaded after every store).
struct Bf16Decoder {
  __m512i t0, t1, t2, t3, finite_max;
  MXTRAIN_AVX512 explicit Bf16Decoder(const Bf16Table& t)
      : t0(_mm512_load_si512(t.bits.data())),
        t1(_mm512_load_si512(t.bits.data() + 32)),
        t2(_mm512_load_si512(t.bits.data() + 64)),
        t3(_mm512_load_si512(t.bits.data() + 96)),
        finite_max(_mm512_set1_epi16(static_cast<int16_t>(t.finite_max))) {}
  MXTRAIN_AVX512 __m512i operator()(__m256i codes, __m512i offsets) const {
    return DecodeBf16x32(t0, t1, t2, t3, finite_max, codes, offsets);
  }
  MXTRAIN_AVX512 __m512i operator()(const uint8_t* codes, __m512i offsets) const {
    return (*this)(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)), offsets);
  }
};

// The logical row f, K block kb (32 values) of an operand as bf16 into out[32]; scalar for
// columnwise storage and partial blocks.
MXTRAIN_AVX512 void DecodeRowBlock(const GemmOperand& op, const Bf16Table& table, int64_t f,
                                   int64_t kb, uint16_t* out) {
  const int64_t k0 = kb * 32;
  if (f >= op.free) {
    std::memset(out, 0, 64);
    return;
  }
  for (int64_t c = 0; c < 32; ++c) {
    const int64_t k = k0 + c;
    out[c] = k < op.s ? DecodeBf16(table, op.format, op.Code(f, k), op.Scale(f, kb)) : 0;
  }
}

// Storage row k (a K index) of a columnwise operand, free indices [f0, f0 + 32), as bf16;
// scalar (the partial last 32 free indices).
MXTRAIN_AVX512 void DecodeStorageRow(const GemmOperand& op, const Bf16Table& table, int64_t k,
                                     int64_t f0, uint16_t* out) {
  if (k >= op.s) {
    std::memset(out, 0, 64);
    return;
  }
  const int64_t kb = k / 32;
  for (int64_t c = 0; c < 32; ++c) {
    const int64_t f = f0 + c;
    out[c] = f < op.free ? DecodeBf16(table, op.format, op.Code(f, k), op.Scale(f, kb)) : 0;
  }
}

// Rowwise storage: rows[n] = logical rows f0 + n (n < kN), K block kb, as bf16; rows past
// the operand are zero.
template <int kN>
MXTRAIN_AVX512 inline void DecodeRowBlocks(const GemmOperand& op, const Bf16Decoder& dec,
                                           const Bf16Table& table, int64_t f0, int64_t kb,
                                           __m512i* rows) {
  const int64_t k0 = kb * 32;
  if (k0 + 32 <= op.s) {
#pragma GCC unroll 32
    for (int n = 0; n < kN; ++n) {
      const int64_t f = f0 + n;
      rows[n] = f < op.free
                    ? dec(op.data + f * op.s + k0, BroadcastOffset(op.scales[f * op.blocks + kb]))
                    : _mm512_setzero_si512();
    }
    return;
  }
  alignas(64) uint16_t buf[kN][32];
  for (int n = 0; n < kN; ++n) DecodeRowBlock(op, table, f0 + n, kb, buf[n]);
  for (int n = 0; n < kN; ++n) rows[n] = _mm512_load_si512(buf[n]);
}

// Columnwise storage, K block kb over free indices [f0, f0 + 32) that all exist in the
// operand: Row(c) decodes storage row 32 kb + c (K past S zero), with the 32 column scales
// loaded once. DecodeStorageRows takes all 32 rows, a pair-row pack two at a time.
struct StorageRowsInside {
  const GemmOperand& op;
  const Bf16Decoder& dec;
  int64_t k0;
  const uint8_t* codes;  // storage row k0's first code
  __m512i offsets;
  MXTRAIN_AVX512 StorageRowsInside(const GemmOperand& o, const Bf16Decoder& d, int64_t kb,
                                   int64_t f0)
      : op(o),
        dec(d),
        k0(kb * 32),
        codes(o.data + kb * 32 * o.free + f0),
        offsets(OffsetsOf(o.scales + kb * o.free + f0)) {
    MXTRAIN_DCHECK(f0 + 32 <= o.free);
  }
  MXTRAIN_AVX512 __m512i Row(int c) const {
    return k0 + c < op.s ? dec(codes + c * op.free, offsets) : _mm512_setzero_si512();
  }
};

// Columnwise storage: rows[c] = storage row 32 kb + c (a K index) over free indices
// [f0, f0 + 32), as bf16; K past the operand and free indices past it are zero. All 32 rows
// share one vector of column scales.
MXTRAIN_AVX512 inline void DecodeStorageRows(const GemmOperand& op, const Bf16Decoder& dec,
                                             const Bf16Table& table, int64_t kb, int64_t f0,
                                             __m512i* rows) {
  const int64_t k0 = kb * 32;
  if (f0 + 32 <= op.free) {
    const StorageRowsInside inside(op, dec, kb, f0);
#pragma GCC unroll 32
    for (int c = 0; c < 32; ++c) rows[c] = inside.Row(c);
    return;
  }
  alignas(64) uint16_t buf[32][32];
  for (int c = 0; c < 32; ++c) DecodeStorageRow(op, table, k0 + c, f0, buf[c]);
  for (int c = 0; c < 32; ++c) rows[c] = _mm512_load_si512(buf[c]);
}

// Index vectors of the butterfly stages of TransposeRows, built at compile time.
template <typename T>
struct TransposeIndices {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- or 64-bit lanes");
  static constexpr int kN = 64 / static_cast<int>(sizeof(T));
  static constexpr int kStages = kN == 16 ? 4 : 3;
  alignas(64) T lo[kStages][kN] = {};
  alignas(64) T hi[kStages][kN] = {};
  constexpr TransposeIndices() {
    for (int stage = 0; stage < kStages; ++stage) {
      const int b = (kN / 2) >> stage;
      for (int c = 0; c < kN; ++c) {
        lo[stage][c] = static_cast<T>((c & b) == 0 ? c : kN + c - b);
        hi[stage][c] = static_cast<T>((c & b) == 0 ? c + b : kN + c);
      }
    }
  }
};
template <typename T>
inline constexpr TransposeIndices<T> kTransposeIndices{};

// One butterfly stage over N rows: for each row pair (i, i + b), i without bit b, the
// two-register permutes `lo` and `hi` in units of U (32- or 64-bit lanes).
template <typename U, int kN>
MXTRAIN_AVX512 inline void TransposeStage(__m512i* rows, int b, __m512i lo, __m512i hi) {
#pragma GCC unroll 32
  for (int i = 0; i < kN; ++i) {
    if (i & b) continue;
    const __m512i top = rows[i], bottom = rows[i + b];
    if constexpr (sizeof(U) == 8) {
      rows[i] = _mm512_permutex2var_epi64(top, lo, bottom);
      rows[i + b] = _mm512_permutex2var_epi64(top, hi, bottom);
    } else {
      rows[i] = _mm512_permutex2var_epi32(top, lo, bottom);
      rows[i + b] = _mm512_permutex2var_epi32(top, hi, bottom);
    }
  }
}

// Transposes a square matrix of 64-byte rows of T held in registers: N = 64 / sizeof(T)
// rows (32 of 16-bit values, 16 of 32-bit ones), log2(N) butterfly stages that swap the
// off-diagonal b x b blocks (b = N/2 .. 1), two two-register permutes per row pair each.
// For 16-bit values the stages whose blocks are whole 64- or 32-bit lanes permute those
// (one uop each, where a 16-bit vpermt2w takes three), and the last (b = 1) is a shift and
// a blend per row. Fully unrolled, so that the rows stay in registers.
template <typename T>
MXTRAIN_AVX512 inline void TransposeRows(__m512i* rows) {
  if constexpr (sizeof(T) == 4) {
#pragma GCC unroll 4
    for (int stage = 0; stage < 4; ++stage) {
      TransposeStage<uint32_t, 16>(rows, 8 >> stage,
                                   _mm512_load_si512(kTransposeIndices<uint32_t>.lo[stage]),
                                   _mm512_load_si512(kTransposeIndices<uint32_t>.hi[stage]));
    }
  } else {
    static_assert(sizeof(T) == 2);
    // b = 16, 8, 4 values: 4, 2, 1 64-bit lanes; b = 2: one 32-bit lane.
#pragma GCC unroll 3
    for (int stage = 0; stage < 3; ++stage) {
      TransposeStage<uint64_t, 32>(rows, 16 >> stage,
                                   _mm512_load_si512(kTransposeIndices<uint64_t>.lo[stage]),
                                   _mm512_load_si512(kTransposeIndices<uint64_t>.hi[stage]));
    }
    TransposeStage<uint32_t, 32>(rows, 2, _mm512_load_si512(kTransposeIndices<uint32_t>.lo[3]),
                                 _mm512_load_si512(kTransposeIndices<uint32_t>.hi[3]));
    // b = 1: row i takes (top[c], bottom[c - 1]) at (even, odd) c, row i + 1 (top[c + 1],
    // bottom[c]).
    // (The zero-masked shifts: GCC 12 warns that the plain ones read an undefined vector.)
    constexpr __mmask32 kOdd = 0xAAAAAAAAu;
    constexpr __mmask16 kAll = 0xFFFF;
#pragma GCC unroll 16
    for (int i = 0; i < 32; i += 2) {
      const __m512i top = rows[i], bottom = rows[i + 1];
      rows[i] = _mm512_mask_blend_epi16(kOdd, top, _mm512_maskz_slli_epi32(kAll, bottom, 16));
      rows[i + 1] = _mm512_mask_blend_epi16(kOdd, _mm512_maskz_srli_epi32(kAll, top, 16), bottom);
    }
  }
}

// Whole-operand packs are written with non-temporal stores (kStream): such a pack is larger
// than L2 and is read back panel by panel long after, so ordinary stores only add a read of
// every line (measured: packing 16M rowwise codes 2.3 -> 1.2 ms, 64M columnwise 15 -> 8 ms
// on 2 threads). Those packing loops end with an sfence before their barrier. A column
// item of B packed just before its use (RunBf16Gemm) is written with ordinary stores, to
// stay in L2.
template <bool kStream = true>
MXTRAIN_AVX512 inline void StoreRow(uint16_t* dst, __m512i v) {
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), v);
  } else {
    _mm512_store_si512(dst, v);
  }
}

template <bool kStream = true>
MXTRAIN_AVX512 inline void StoreRows(const __m512i* rows, int n, uint16_t* dst) {
  for (int r = 0; r < n; ++r) StoreRow<kStream>(dst + r * 32, rows[r]);
}

// A (logical [I, S]) as 16x32 row tiles: tile (ti, kb) holds rows 16 ti.., K 32 kb..
// Rows past I and K past S are zero.
template <bool kStream>
MXTRAIN_AVX512 void PackATiles(const GemmOperand& op, const Bf16Table& table, int64_t ti,
                               int64_t kbs, uint16_t* dst) {
  const Bf16Decoder dec(table);
  for (int64_t kb = 0; kb < kbs; ++kb) {
    __m512i rows[16];
    DecodeRowBlocks<16>(op, dec, table, ti * 16, kb, rows);
    StoreRows<kStream>(rows, 16, dst + (ti * kbs + kb) * kTileElems);
  }
}

// Columnwise storage [S, F]: the 32 storage rows (K) of K block kb over the free indices
// [f0, f0 + 32) as pair rows: row p of tile0 holds, for free indices f0 .. f0 + 15, the
// pairs (K 32 kb + 2p, 32 kb + 2p + 1), tile1 the same for f0 + 16 .. f0 + 31. The layout
// TDPBF16PS reads B in, and DpBlock a columnwise A (`a_pairs`).
template <bool kStream>
MXTRAIN_AVX512 void PackPairRowsColumnwise(const GemmOperand& op, const Bf16Table& table,
                                           int64_t f0, int64_t kb, uint16_t* tile0,
                                           uint16_t* tile1) {
  // Pair-interleaving indices: output row p of tile t takes (row 2p, row 2p+1) of free
  // indices 16 t .. 16 t + 15, i.e. lanes (n, 32 + n) of the concatenation of the two
  // storage rows.
  alignas(64) static constexpr uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                   37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                   11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                   53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                   27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const Bf16Decoder dec(table);
  const __m512i lo_idx = _mm512_load_si512(kLo), hi_idx = _mm512_load_si512(kHi);
  const auto store = [&](int p, __m512i r0, __m512i r1) MXTRAIN_AVX512 {
    StoreRow<kStream>(tile0 + p * 32, _mm512_permutex2var_epi16(r0, lo_idx, r1));
    StoreRow<kStream>(tile1 + p * 32, _mm512_permutex2var_epi16(r0, hi_idx, r1));
  };
  if (f0 + 32 <= op.free) {
    // A row pair at a time, two rows live: decoding all 32 first spilled them, and the
    // decoder's constants, to the stack.
    const StorageRowsInside inside(op, dec, kb, f0);
    for (int p = 0; p < 16; ++p) store(p, inside.Row(2 * p), inside.Row(2 * p + 1));
    return;
  }
  // The operand's last, partial 32 free indices: all 32 rows through the scalar decode.
  __m512i rows[32];
  DecodeStorageRows(op, dec, table, kb, f0, rows);
  for (int p = 0; p < 16; ++p) store(p, rows[2 * p], rows[2 * p + 1]);
}

// Columnwise storage [S, I]: tiles ti and ti + 1 of K block kb from the 32 storage rows
// (K) over their 32 free indices. As rows (AMX's A): the 16-bit transpose, rows 0-15 of it
// tile ti, rows 16-31 tile ti + 1. As pairs (DpBlock's A, `pairs`): PackPairRowsColumnwise,
// two permutes a row pair where the transpose takes about six and spills (a small wgrad's
// A pack: a tenth of its samples).
template <bool kStream>
MXTRAIN_AVX512 void PackATilePairColumnwise(const GemmOperand& op, const Bf16Table& table,
                                            int64_t ti, int64_t kb, int64_t kbs, bool pairs,
                                            uint16_t* dst) {
  uint16_t* tile0 = dst + (ti * kbs + kb) * kTileElems;
  uint16_t* tile1 = dst + ((ti + 1) * kbs + kb) * kTileElems;
  if (pairs) {
    PackPairRowsColumnwise<kStream>(op, table, ti * 16, kb, tile0, tile1);
    return;
  }
  const Bf16Decoder dec(table);
  __m512i rows[32];
  DecodeStorageRows(op, dec, table, kb, ti * 16, rows);
  TransposeRows<uint16_t>(rows);
  StoreRows<kStream>(rows, 16, tile0);
  StoreRows<kStream>(rows + 16, 16, tile1);
}

// Tiles [ti0, ti1) of A (both even: whole 32-row panels) on the calling thread, with
// ordinary stores: the rows a thread is about to compute, packed into its own L2. Columnwise
// storage K block by K block, so that consecutive tile pairs read adjacent bytes of each
// storage row.
void PackARowsCached(const GemmOperand& op, const Bf16Table& table, int64_t ti0, int64_t ti1,
                     int64_t kbs, bool pairs, uint16_t* dst) {
  MXTRAIN_DCHECK(ti0 % 2 == 0 && ti1 % 2 == 0);
  if (!op.contract_rows) {
    for (int64_t ti = ti0; ti < ti1; ++ti) PackATiles<false>(op, table, ti, kbs, dst);
    return;
  }
  for (int64_t kb = 0; kb < kbs; ++kb) {
    for (int64_t ti = ti0; ti < ti1; ti += 2) {
      PackATilePairColumnwise<false>(op, table, ti, kb, kbs, pairs, dst);
    }
  }
}

// Room for `tiles` 16-row (or 16-column) tiles of an operand over kbs K blocks.
Tensor EmptyTiles(int64_t tiles, int64_t kbs) {
  return Tensor::Empty(DType::kBF16, {tiles, kbs, kTileElems}, MemoryCategory::kWorkspace);
}

// All of A, streamed; a columnwise A as pair rows where `pairs` (PackATilePairColumnwise).
Tensor PackA(const GemmOperand& op, const Bf16Table& table, int64_t rows_pad, int64_t kbs,
             bool pairs, int threads) {
  MXTRAIN_DCHECK(rows_pad % kBlockDim == 0 && rows_pad >= op.free && kbs == op.blocks);
  Tensor out = EmptyTiles(rows_pad / 16, kbs);
  uint16_t* dst = out.mutable_data<uint16_t>();
  MXTRAIN_DCHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0);  // whole-line (streamed) stores
  if (!op.contract_rows) {
#pragma omp parallel num_threads(threads)
    {
      const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static) nowait
      for (int64_t ti = 0; ti < rows_pad / 16; ++ti) PackATiles<true>(op, table, ti, kbs, dst);
      _mm_sfence();
    }
    return out;
  }
  // Columnwise: threads split the K blocks and each walks its storage rows from the first
  // free index to the last, so every row is read in order and whole cache lines are used
  // (tile pair by tile pair down K would read 32 bytes per line at a stride of I bytes).
  // rows_pad is a multiple of 32.
#pragma omp parallel num_threads(threads)
  {
    const internal::ScopedFpEnv fp_env;
#pragma omp for schedule(static) nowait
    for (int64_t kb = 0; kb < kbs; ++kb) {
      for (int64_t ti = 0; ti < rows_pad / 16; ti += 2) {
        PackATilePairColumnwise<true>(op, table, ti, kb, kbs, pairs, dst);
      }
    }
    _mm_sfence();
  }
  return out;
}

// B (logical [J, S]) in the layout TDPBF16PS reads: tile (tj, kb) row p holds, for the 16
// columns n of the tile, the pair (B[n][2p], B[n][2p + 1]) of K 32 kb + 2p. Packs tiles
// 2 tp and 2 tp + 1 (32 columns) of K block kb into `pair`, where the pair's 2 kbs tiles
// start (tile 2 tp of K block kb at pair + kb tiles, tile 2 tp + 1 kbs tiles further).
template <bool kStream>
MXTRAIN_AVX512 void PackBTilePair(const GemmOperand& op, const Bf16Table& table, int64_t tp,
                                  int64_t kb, int64_t kbs, uint16_t* pair) {
  uint16_t* tile0 = pair + kb * kTileElems;
  uint16_t* tile1 = pair + (kbs + kb) * kTileElems;
  if (!op.contract_rows) {
    const Bf16Decoder dec(table);
    __m512i rows[32];
    // Storage rows are columns n: row n's 32 values are its 16 K pairs, so each tile is the
    // 16x16 transpose, in 32-bit pairs, of its 16 decoded rows.
    DecodeRowBlocks<32>(op, dec, table, tp * 32, kb, rows);
    TransposeRows<uint32_t>(rows);
    TransposeRows<uint32_t>(rows + 16);
    StoreRows<kStream>(rows, 16, tile0);
    StoreRows<kStream>(rows + 16, 16, tile1);
    return;
  }
  // Storage rows are K.
  PackPairRowsColumnwise<kStream>(op, table, tp * 32, kb, tile0, tile1);
}

// Tile pairs [tp0, tp1) of B over K blocks [kb0, kb1) into dst (pair tp at dst + 2 (tp - tp0)
// kbs tiles), on the calling thread: rowwise storage pair by pair, columnwise by K block so
// that each storage row is read in order (tile pair by tile pair down K would read 32 bytes
// per line at a stride of J bytes).
template <bool kStream>
void PackBPairs(const GemmOperand& op, const Bf16Table& table, int64_t tp0, int64_t tp1,
                int64_t kb0, int64_t kb1, int64_t kbs, uint16_t* dst) {
  const auto pair = [&](int64_t tp) { return dst + 2 * (tp - tp0) * kbs * kTileElems; };
  if (!op.contract_rows) {
    for (int64_t tp = tp0; tp < tp1; ++tp) {
      for (int64_t kb = kb0; kb < kb1; ++kb) {
        PackBTilePair<kStream>(op, table, tp, kb, kbs, pair(tp));
      }
    }
  } else {
    // The next K block's storage rows into L2 while this one packs: each row's piece of the
    // item is a few lines at a stride of J bytes, which the hardware prefetchers do not
    // follow.
    const int64_t f0 = tp0 * 32, f1 = std::min(op.free, tp1 * 32);
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      for (int64_t k = (kb + 1) * 32; kb + 1 < kb1 && k < std::min(op.s, (kb + 2) * 32); ++k) {
        const uint8_t* row = op.data + k * op.free;
        for (int64_t f = f0; f < f1; f += 64) _mm_prefetch(row + f, _MM_HINT_T1);
      }
      for (int64_t tp = tp0; tp < tp1; ++tp) {
        PackBTilePair<kStream>(op, table, tp, kb, kbs, pair(tp));
      }
    }
  }
}

// The calling thread's share of all of B (cols_pad / 32 tile pairs) inside a parallel
// region: threads split the tile pairs (rowwise storage) or the K blocks (columnwise).
template <bool kStream>
void PackBShare(const GemmOperand& op, const Bf16Table& table, int64_t cols_pad, int64_t kbs,
                uint16_t* dst) {
  const int64_t pairs = cols_pad / 32;
  if (!op.contract_rows) {
    const ThreadShare tp(pairs);
    PackBPairs<kStream>(op, table, tp.begin, tp.end, 0, kbs, kbs,
                        dst + 2 * tp.begin * kbs * kTileElems);
  } else {
    const ThreadShare kb(kbs);
    PackBPairs<kStream>(op, table, 0, pairs, kb.begin, kb.end, kbs, dst);
  }
}

// All of B, streamed.
Tensor PackB(const GemmOperand& op, const Bf16Table& table, int64_t cols_pad, int64_t kbs,
             int threads) {
  MXTRAIN_DCHECK(cols_pad % kBlockDim == 0 && cols_pad >= op.free && kbs == op.blocks);
  Tensor out = EmptyTiles(cols_pad / 16, kbs);
  uint16_t* dst = out.mutable_data<uint16_t>();
  MXTRAIN_DCHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0);  // whole-line (streamed) stores
#pragma omp parallel num_threads(threads)
  {
    const internal::ScopedFpEnv fp_env;
    PackBShare<true>(op, table, cols_pad, kbs, dst);
    _mm_sfence();
  }
  return out;
}

// The 16 cache lines of one 1 KiB tile into L1.
inline void PrefetchTileL1(const uint16_t* tile) {
  const char* p = reinterpret_cast<const char*>(tile);
  for (int line = 0; line < 16; ++line) _mm_prefetch(p + 64 * line, _MM_HINT_T0);
}

// The C block the driver will load after the current one (c == nullptr: none, or it starts
// from zero). Past the first K chunk every block starts with four tile loads of 16 rows
// at a stride of a whole C row, long evicted from L2; the current block prefetches them
// into L2, spread over its K steps (measured in alternating runs: square_4096 2518-2548
// -> 2599-2626 GFLOP/s, layer_fc2 and layer_qkv -1 to +4%, +1-2% on average).
struct NextC {
  static constexpr int64_t kLines = 64;  // 32 rows x 128 bytes
  const float* c = nullptr;
  int64_t ldc = 0;
};

// C[32x32] (row stride ldc floats) += A panel (tiles a, a + kbs) . B panel (tiles b, b + kbs)
// over K blocks [kb0, kb1).
// load_c: false when C is known to be zero (first K chunk, no accumulator): the tiles
// start from zero instead of a load from memory.
template <class Tiles>
MXTRAIN_AMX void AmxBlock(const uint16_t* a, const uint16_t* b, int64_t kbs, int64_t kb0,
                          int64_t kb1, float* c, int64_t ldc, bool load_c, NextC next) {
  MXTRAIN_DCHECK(0 <= kb0 && kb0 < kb1 && kb1 <= kbs && ldc >= kBlockDim);
  const int64_t stride = ldc * static_cast<int64_t>(sizeof(float));
  if (load_c) {
    Tiles::template Load<0>(c, stride);
    Tiles::template Load<1>(c + 16, stride);
    Tiles::template Load<2>(c + 16 * ldc, stride);
    Tiles::template Load<3>(c + 16 * ldc + 16, stride);
  } else {
    Tiles::template Zero<0>();
    Tiles::template Zero<1>();
    Tiles::template Zero<2>();
    Tiles::template Zero<3>();
  }
  const uint16_t* a1 = a + kbs * kTileElems;
  const uint16_t* b1 = b + kbs * kTileElems;
  const int64_t next_per_step = next.c != nullptr ? CeilDiv(NextC::kLines, kb1 - kb0) : 0;
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t line0 = (kb - kb0) * next_per_step;
    for (int64_t l = line0; l < std::min(NextC::kLines, line0 + next_per_step); ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(next.c + (l >> 1) * next.ldc + (l & 1) * 16),
                   _MM_HINT_T1);
    }
    // The four tiles of two steps ahead into L1: tile loads that miss L1 wait on line-fill
    // buffers (measured: square_4096 1774-1805 -> 1891-1907 GFLOP/s, layer_fc1_fprop
    // 1736-1807 -> 1843-1885, wgrad and dgrad within noise to +8%).
    if (kb + 2 < kb1) {
      PrefetchTileL1(a + (kb + 2) * kTileElems);
      PrefetchTileL1(b + (kb + 2) * kTileElems);
      PrefetchTileL1(b1 + (kb + 2) * kTileElems);
      PrefetchTileL1(a1 + (kb + 2) * kTileElems);
    }
    // Loads interleaved with the products that need them, so that each load overlaps the
    // previous product (measured: 2.5 TFLOP/s per core from L1 against 0.7 when all four
    // tiles load first).
    Tiles::template Load<4>(a + kb * kTileElems, 64);
    Tiles::template Load<6>(b + kb * kTileElems, 64);
    Tiles::template DotBf16<0, 4, 6>();
    Tiles::template Load<7>(b1 + kb * kTileElems, 64);
    Tiles::template DotBf16<1, 4, 7>();
    Tiles::template Load<5>(a1 + kb * kTileElems, 64);
    Tiles::template DotBf16<2, 5, 6>();
    Tiles::template DotBf16<3, 5, 7>();
  }
  Tiles::template Store<0>(c, stride);
  Tiles::template Store<1>(c + 16, stride);
  Tiles::template Store<2>(c + 16 * ldc, stride);
  Tiles::template Store<3>(c + 16 * ldc + 16, stride);
}

// 16 fp32 lanes rounded to bf16 as F32ToBf16 rounds (nearest even; a NaN quieted, its sign
// kept), narrowed to 16-bit lanes.
MXTRAIN_AVX512 inline __m256i Bf16Of(__m512 v) {
  // (Zero-masked shifts and narrowing: GCC 12 warns that the plain ones read an undefined
  // vector.)
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i high = _mm512_maskz_srli_epi32(kAll, bits, 16);
  const __m512i bias =
      _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7FFF));
  const __m512i rounded = _mm512_maskz_srli_epi32(kAll, _mm512_add_epi32(bits, bias), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  return _mm512_maskz_cvtepi32_epi16(kAll, _mm512_mask_blend_epi32(nan, rounded, quiet));
}

// Where a block's last K chunk goes instead of C: C + bias rounded to bf16 (FinishGemm's
// order), `ld` elements a row; bias null for none. c16 null: C as usual.
struct Bf16Dst {
  uint16_t* c16 = nullptr;
  int64_t ld = 0;
  const float* bias = nullptr;  // the block's 32 columns
};

// The same C block with VDPBF16PS, in strips of 8 rows x 32 columns (A tile ta, rows
// 8 h ..): 16 zmm accumulators, and per K pair p, two loads of B's row p (tiles 0 and 1:
// 16 columns x 2 each) and one broadcast of each row's pair (A[r][2p], A[r][2p + 1]) that
// both column halves use. Only the strips that hold C's first `rows` rows run (an edge
// block of a group of 737 tokens has one row: one strip instead of four). kPrefetchB:
// whether B's tiles are prefetched into L1 beside A's rows (DpPrefetchesB). kAPairs: A's
// tiles hold pair rows, as B's do (a columnwise A, PackATilePairColumnwise): row r's pair p
// at p * 32 + 2 r instead of r * 32 + 2 p.
template <bool kPrefetchB, bool kAPairs>
MXTRAIN_DPBF16 void DpBlock(const uint16_t* a, const uint16_t* b, int64_t kbs, int64_t kb0,
                            int64_t kb1, float* c, int64_t ldc, bool load_c, int64_t rows,
                            Bf16Dst out16) {
  MXTRAIN_DCHECK(0 <= kb0 && kb0 < kb1 && kb1 <= kbs && ldc >= kBlockDim);
  MXTRAIN_DCHECK(0 < rows && rows <= kBlockDim);
  MXTRAIN_DCHECK(reinterpret_cast<uintptr_t>(b) % 64 == 0);  // aligned loads of B's rows
  constexpr int kStrip = 8;
  const uint16_t* b1 = b + kbs * kTileElems;
  for (int64_t strip = 0; strip < CeilDiv(rows, kStrip); ++strip) {
    const int64_t ta = strip / 2, r0 = (strip % 2) * kStrip;
    const uint16_t* a_tiles = a + ta * kbs * kTileElems;  // this strip's 16-row tile, kb 0
    const uint16_t* at = a_tiles + (kAPairs ? 2 * r0 : r0 * 32);
    float* cs = c + (ta * 16 + r0) * ldc;
    __m512 acc[kStrip][2];
    for (int r = 0; r < kStrip; ++r) {
      acc[r][0] = load_c ? _mm512_loadu_ps(cs + r * ldc) : _mm512_setzero_ps();
      acc[r][1] = load_c ? _mm512_loadu_ps(cs + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      const uint16_t* a_tile = at + kb * kTileElems;
      const uint16_t* b_tile0 = b + kb * kTileElems;
      const uint16_t* b_tile1 = b1 + kb * kTileElems;
      // This strip's A rows (and B's tiles where DpPrefetchesB) of two K blocks ahead into
      // L1, as AmxBlock does: the profile put the stalls on the loads of A pairs, which the
      // hardware prefetchers leave in L2 (Sapphire Rapids, alternating binaries, A and B:
      // square_4096 715-740 -> 663-684 ms, layer_proj fprop 349-371 -> 337-341; Zen 4, A
      // alone: square_4096 0.84 -> 0.92 of peak; 4 blocks ahead no better on either).
      if (kb + 2 < kb1) {
        if constexpr (kAPairs) {  // the strip's pairs: half of each of the tile's 16 lines
          PrefetchTileL1(a_tiles + (kb + 2) * kTileElems);
        } else {
          const char* an = reinterpret_cast<const char*>(a_tile + 2 * kTileElems);
          for (int r = 0; r < kStrip; ++r) _mm_prefetch(an + 64 * r, _MM_HINT_T0);
        }
        if constexpr (kPrefetchB) {
          PrefetchTileL1(b_tile0 + 2 * kTileElems);
          PrefetchTileL1(b_tile1 + 2 * kTileElems);
        }
      }
      for (int p = 0; p < 16; ++p) {
        const __m512bh bv0 = (__m512bh)_mm512_load_si512(b_tile0 + p * 32);
        const __m512bh bv1 = (__m512bh)_mm512_load_si512(b_tile1 + p * 32);
        for (int r = 0; r < kStrip; ++r) {
          int32_t pair;
          std::memcpy(&pair, kAPairs ? a_tile + p * 32 + 2 * r : a_tile + r * 32 + 2 * p,
                      sizeof(pair));
          const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, bv0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, bv1);
        }
      }
    }
    if (out16.c16 != nullptr) {
      const __m512 bias0 =
          out16.bias != nullptr ? _mm512_loadu_ps(out16.bias) : _mm512_setzero_ps();
      const __m512 bias1 =
          out16.bias != nullptr ? _mm512_loadu_ps(out16.bias + 16) : _mm512_setzero_ps();
      uint16_t* c16 = out16.c16 + (ta * 16 + r0) * out16.ld;
      for (int r = 0; r < kStrip; ++r) {
        __m512 v0 = acc[r][0], v1 = acc[r][1];
        if (out16.bias != nullptr) {
          v0 = _mm512_add_ps(v0, bias0);
          v1 = _mm512_add_ps(v1, bias1);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c16 + r * out16.ld), Bf16Of(v0));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c16 + r * out16.ld + 16), Bf16Of(v1));
      }
      continue;
    }
    for (int r = 0; r < kStrip; ++r) {
      _mm512_storeu_ps(cs + r * ldc, acc[r][0]);
      _mm512_storeu_ps(cs + r * ldc + 16, acc[r][1]);
    }
  }
}

// The microkernels the driver below runs: Begin and End once per thread, Block per C block
// and K chunk. Block's `rows`: how many of the block's 32 rows exist (the rest of C's
// block is scratch, its A rows zero); a kernel may compute all 32.
// kRoundsBf16: Block takes a Bf16Dst for a block's last K chunk (the AMX kernel stores
// its tiles as fp32 and leaves the rounding to FinishGemm). kAPairs: a columnwise A is
// packed as pair rows (PackATilePairColumnwise), and Block's `a_pairs` says so.
template <class Tiles>
struct AmxKernel {
  static constexpr bool kRoundsBf16 = false;
  static constexpr bool kAPairs = false;  // TDPBF16PS reads A's tiles as rows
  static void Begin() { Tiles::Configure(); }
  static void Block(const uint16_t* a, const uint16_t* b, int64_t kbs, int64_t kb0, int64_t kb1,
                    float* c, int64_t ldc, bool load_c, NextC next, int64_t /*rows*/,
                    Bf16Dst /*out16*/, bool /*a_pairs*/) {
    AmxBlock<Tiles>(a, b, kbs, kb0, kb1, c, ldc, load_c, next);
  }
  static void End() { Tiles::Release(); }
};

// Whether DpBlock prefetches B's tiles into L1 as well as A's rows: on Intel CPUs, where
// the two together were measured (Sapphire Rapids, above), not on others. On Zen 4 B's
// prefetch costs time (alternating binaries, release build: square_4096 on 2 threads
// 0.903-0.909 -> 0.924-0.931 of the VDPBF16PS peak without it, a one-thread 4096 x 1408 x
// 2048 211.8-215.3 -> 220.1-223.2 GFLOP/s; prefetching B in a block's first strip only:
// 0.895-0.897). Each B tile is read by the block's four strips, from L2 or L3, and Zen 4's
// own prefetchers keep up; why the extra prefetches cost there was not measured (no
// hardware counters in its VM).
inline bool DpPrefetchesB() {
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
}

struct DpKernel {
  static constexpr bool kRoundsBf16 = true;
  static constexpr bool kAPairs = true;  // a columnwise A packed as pair rows
  static void Begin() {}
  // VDPBF16PS loads C one zmm row at a time, which the hardware prefetchers follow: no
  // prefetch of the next block.
  static void Block(const uint16_t* a, const uint16_t* b, int64_t kbs, int64_t kb0, int64_t kb1,
                    float* c, int64_t ldc, bool load_c, NextC /*next*/, int64_t rows, Bf16Dst out16,
                    bool a_pairs) {
    const auto run = [&](auto prefetch_b, auto pairs) {
      DpBlock<decltype(prefetch_b)::value, decltype(pairs)::value>(a, b, kbs, kb0, kb1, c, ldc,
                                                                   load_c, rows, out16);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (DpPrefetchesB()) {
      a_pairs ? run(Yes(), Yes()) : run(Yes(), No());
    } else {
      a_pairs ? run(No(), Yes()) : run(No(), No());
    }
  }
  static void End() {}
};

template <class Kernel>
void RunBf16Gemm(const GemmProblem& p, std::vector<uint8_t>& skipped) {
  const int64_t rows = p.a.free, cols = p.b.free;
  const int64_t rows_pad = CeilDiv(rows, kBlockDim) * kBlockDim;
  const int64_t cols_pad = CeilDiv(cols, kBlockDim) * kBlockDim;
  const int64_t kbs = p.a.blocks;
  const int64_t panels_i = rows_pad / kBlockDim, panels_j = cols_pad / kBlockDim;
  const std::vector<uint8_t> block_ok = PlanBlocks(p, kBlockDim, kBlockDim, skipped);
  // K chunks outermost within an item (C blocks reloaded per chunk past the first), so that
  // only one chunk of each panel's B tiles has to stay in L2 and an item can be wide.
  const int64_t resident_kbs = std::min(kbs, kChunkBlocks);
  const int64_t panel_bytes =
      2 * resident_kbs * kTileElems * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t column_panels =
      std::clamp<int64_t>(kBudgetBytes / std::max<int64_t>(panel_bytes, 1), 2, 64);
  const int64_t items = CeilDiv(panels_j, column_panels);

  // Work: (column item, row range) pairs. With enough row panels each thread takes its own
  // share of the rows of every column item, so each streams only its part of A past the B
  // tiles in its L2 (halving A traffic from L3 on 2 threads), and B is packed once for all;
  // otherwise (one thread included: the grouped GEMM's experts) threads split the column
  // items and each packs its item's B tiles just before using them, so that they go to L2
  // instead of to memory and back (an expert's weights are packed for every call).
  const bool split_rows = p.threads > 1 && panels_i >= 2 * p.threads;
  // Small operands are packed inside the compute region with ordinary stores (`in_region`):
  // each thread packs the A rows it computes, which then stay in its L2, and its share of B
  // before a barrier. A GEMM of the model (1024 x 128 x 128: 0.1 ms) spent a third of its
  // time in two more parallel regions and in reading streamed packs back from memory. Large
  // ones are packed first, with non-temporal stores (StoreRow).
  const int64_t a_bytes = rows_pad * kbs * 32 * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t b_bytes = cols_pad * kbs * 32 * static_cast<int64_t>(sizeof(uint16_t));
  const bool in_region = split_rows ? a_bytes / p.threads + b_bytes <= kInRegionBytes
                                    : p.threads == 1 && a_bytes <= kInRegionBytes;
  // There each thread packs all of B for itself when its copy is small (kPrivateBPackBytes,
  // kernels.h); a thread's own A rows and B need no barrier.
  const bool private_b = split_rows && in_region && b_bytes <= kPrivateBPackBytes;
  const Bf16Table& a_table = Bf16TableOf(p.a.format);
  const bool a_pairs = Kernel::kAPairs && p.a.contract_rows;
  Tensor a_pack = in_region ? EmptyTiles(rows_pad / 16, kbs)
                            : PackA(p.a, a_table, rows_pad, kbs, a_pairs, p.threads);
  uint16_t* const a_dst = in_region ? a_pack.mutable_data<uint16_t>() : nullptr;
  const uint16_t* a = a_pack.const_data<uint16_t>();
  // A bf16 result rounded from the kernel's accumulators in each block's last K chunk, so
  // that no pass over C follows (GemmBf16Out); the driver rounds the exact path's tiles.
  const bool rounds_bf16 = Kernel::kRoundsBf16 && p.bf16_out != nullptr;
  if (rounds_bf16) p.bf16_out->written = true;
  const Bf16Table& b_table = Bf16TableOf(p.b.format);
  Tensor b_pack = !split_rows || private_b ? Tensor()
                  : in_region              ? EmptyTiles(cols_pad / 16, kbs)
                                           : PackB(p.b, b_table, cols_pad, kbs, p.threads);
  uint16_t* const b_dst =
      split_rows && in_region && !private_b ? b_pack.mutable_data<uint16_t>() : nullptr;

#pragma omp parallel num_threads(p.threads)
  {
    const internal::ScopedFpEnv fp_env;
    Kernel::Begin();
    alignas(64) float scratch[kBlockDim * kBlockDim];
    Tensor item_pack;  // this thread's column item of B, when items are packed at use
    if (!split_rows) {
      item_pack = EmptyTiles(2 * column_panels, kbs);
      MXTRAIN_DCHECK(reinterpret_cast<uintptr_t>(item_pack.raw()) % 64 == 0);
    }
    Tensor own_b;  // all of B, this thread's copy (private_b); whole_b: the B every item reads
    if (private_b) own_b = EmptyTiles(cols_pad / 16, kbs);
    const uint16_t* const whole_b = private_b
                                        ? own_b.const_data<uint16_t>()
                                        : (split_rows ? b_pack.const_data<uint16_t>() : nullptr);
    // C blocks of rows [pi_begin, pi_end) x column item `item`, over the K chunks
    // [chunk0, chunk1) (of kChunkBlocks K blocks each).
    const auto run = [&](int64_t item, int64_t pi_begin, int64_t pi_end, int64_t chunk0,
                         int64_t chunk1) {
      const int64_t pj0 = item * column_panels;
      const int64_t pj1 = std::min(panels_j, pj0 + column_panels);
      // B tiles of panel pj: from the whole pack, or from this item's.
      const uint16_t* b = split_rows ? whole_b : item_pack.const_data<uint16_t>();
      const int64_t pj_base = split_rows ? 0 : pj0;
      if (!split_rows) {  // items packed at use run all their chunks at once
        PackBPairs<false>(p.b, b_table, pj0, pj1, 0, kbs, kbs, item_pack.mutable_data<uint16_t>());
      }
      // One C block (pi, pj) over K blocks [kb0, kb1).
      const auto block = [&](int64_t pi, int64_t pj, int64_t kb0, int64_t kb1, NextC next) {
        if (!block_ok[pi * panels_j + pj]) return;
        const bool load_c = kb0 > 0 || !p.overwrite;
        const uint16_t* a_panel = a + (2 * pi) * kbs * kTileElems;
        const uint16_t* b_panel = b + 2 * (pj - pj_base) * kbs * kTileElems;
        const int64_t i0 = pi * kBlockDim, j0 = pj * kBlockDim;
        const bool last = rounds_bf16 && kb1 == kbs;
        const float* bias = last && p.bf16_out->bias != nullptr ? p.bf16_out->bias + j0 : nullptr;
        if (i0 + kBlockDim <= rows && j0 + kBlockDim <= cols) {
          const Bf16Dst out16 =
              last ? Bf16Dst{p.bf16_out->data + i0 * cols + j0, cols, bias} : Bf16Dst{};
          Kernel::Block(a_panel, b_panel, kbs, kb0, kb1, p.c + i0 * cols + j0, cols, load_c, next,
                        kBlockDim, out16, a_pairs);
          return;
        }
        // An edge block: through a zero-padded copy of the part of C that exists.
        const int64_t h = std::min(kBlockDim, rows - i0), w = std::min(kBlockDim, cols - j0);
        std::memset(scratch, 0, sizeof(scratch));
        for (int64_t r = 0; r < h && load_c; ++r) {
          std::memcpy(scratch + r * kBlockDim, p.c + (i0 + r) * cols + j0, w * sizeof(float));
        }
        Kernel::Block(a_panel, b_panel, kbs, kb0, kb1, scratch, kBlockDim, load_c, next, h,
                      Bf16Dst{}, a_pairs);
        for (int64_t r = 0; r < h; ++r) {
          if (last) {
            NarrowToBf16(scratch + r * kBlockDim, w, bias, p.bf16_out->data + (i0 + r) * cols + j0);
          } else {
            std::memcpy(p.c + (i0 + r) * cols + j0, scratch + r * kBlockDim, w * sizeof(float));
          }
        }
      };
      for (int64_t kb0 = chunk0 * kChunkBlocks; kb0 < std::min(kbs, chunk1 * kChunkBlocks);
           kb0 += kChunkBlocks) {
        const int64_t kb1 = std::min(kbs, kb0 + kChunkBlocks);
        const bool loads_c = kb0 > 0 || !p.overwrite;
        for (int64_t pi = pi_begin; pi < pi_end; ++pi) {
          for (int64_t pj = pj0; pj < pj1; ++pj) {
            // The next block of this chunk: (pi, pj + 1), or the next row's first.
            const bool row_end = pj + 1 == pj1;
            NextC next;
            if (loads_c && (!row_end || pi + 1 < pi_end)) {
              next.c = p.c + (row_end ? pi + 1 : pi) * kBlockDim * cols +
                       (row_end ? pj0 : pj + 1) * kBlockDim;
              next.ldc = cols;
            }
            block(pi, pj, kb0, kb1, next);
          }
        }
      }
    };
    const int64_t team = omp_get_num_threads();
    const int64_t chunks = CeilDiv(kbs, kChunkBlocks);
    if (in_region) {
      if (split_rows) {  // this thread's rows of A (as the loop below splits them), B shared
        const int64_t t = omp_get_thread_num();
        PackARowsCached(p.a, a_table, 2 * (panels_i * t / team), 2 * (panels_i * (t + 1) / team),
                        kbs, a_pairs, a_dst);
        if (private_b) {
          PackBPairs<false>(p.b, b_table, 0, cols_pad / 32, 0, kbs, kbs,
                            own_b.mutable_data<uint16_t>());
        } else {
          PackBShare<false>(p.b, b_table, cols_pad, kbs, b_dst);
#pragma omp barrier
        }
      } else {  // a team of one
        PackARowsCached(p.a, a_table, 0, rows_pad / 16, kbs, a_pairs, a_dst);
      }
    }
    if (split_rows) {
      // K chunks outside the column items: one chunk of this thread's A panels is read by
      // every item while it is still in L3, where item by item over all of K streamed all
      // of A from memory once per item (layer_fc1 wgrad: 128 MiB of A tiles, 8 items).
      // Each C block still takes its chunks in order, so the bytes are the same.
      const int64_t split = omp_get_thread_num();
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        for (int64_t item = 0; item < items; ++item) {
          run(item, panels_i * split / team, panels_i * (split + 1) / team, chunk, chunk + 1);
        }
      }
    } else {
#pragma omp for schedule(dynamic)
      for (int64_t item = 0; item < items; ++item) run(item, 0, panels_i, 0, chunks);
    }
    Kernel::End();
  }
}

}  // namespace

void GemmAmx(const GemmProblem& p, std::vector<uint8_t>& skipped) {
  DCheckGemmProblem(p, skipped);
  MXTRAIN_DCHECK(AmxAvailable());
  RunBf16Gemm<AmxKernel<AmxTiles>>(p, skipped);
}

void GemmAmxEmulated(const GemmProblem& p, std::vector<uint8_t>& skipped) {
  DCheckGemmProblem(p, skipped);
  MXTRAIN_DCHECK(AmxEmulationAvailable());
  RunBf16Gemm<AmxKernel<EmulatedAmxTiles>>(p, skipped);
}

void GemmAvx512Bf16(const GemmProblem& p, std::vector<uint8_t>& skipped) {
  DCheckGemmProblem(p, skipped);
  MXTRAIN_DCHECK(Avx512Bf16Available());
  RunBf16Gemm<DpKernel>(p, skipped);
}

}  // namespace mxtrain::internal
