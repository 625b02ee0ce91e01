// The SIMD fp32 GEMM path (Highway: AVX-512, AVX2, SSE4, ..., FMA where the target has it),
// for machines without AMX or AVX512-BF16. Written once over vector width, BLIS-style:
//
//   for each column block of nc (B panel: K chunk x nc, packed once, shared, in L2/L3)
//     for each group of kChunkGroup K chunks of kc
//       pack B's chunks into kNr-column micro-panels [kc][kNr]        (threads share it out)
//       for each block of mc rows of this thread                      (A block in L2)
//         pack A's block, each chunk into kMr-row micro-panels [kc][kMr] (a rowwise A
//           of a narrow C: [kMr][kc], each row decoded as it lies)
//         for each column of B micro-panels
//           for each chunk of the group, in K order  (its B micro-panel, kc x kNr, in L1)
//             for each A micro-panel: kMr x kNr of C += A . B over kc   (registers)
//
// Packing decodes each FP8 code to fp32 with its block's E8M0 scale folded in, which is
// exact for the exact-safe tiles this path computes (operand.h); other tiles go to the
// driver's exact path. Columnwise operands (dgrad's B, both of wgrad's) are packed K step
// by K step across all the panels of a block, decoded a vector at a time from the bits.
// The register tile is kMr rows x 2 vectors: 6 x 16 on AVX2 (12 of 16 ymm accumulators,
// FMA latency 4-5 x 2 ports needs >= 10 independent chains), 14 x 32 on AVX-512 (28 of 32
// zmm). Per K step it loads 2 B vectors and broadcasts kMr A values.
// Each C element is summed K chunk by K chunk in a fixed order (C = C + chunk sum), so the
// bytes never depend on the thread count, on the blocking over M and N, or on how many
// chunks a group holds (nor, among the targets with FMA, on the target).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_simd.cc"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "convert-inl.h"
#include "fp_env.h"
#include "gemm/kernels.h"
#include "mxtrain/format/bf16.h"
#include "omp_threads.h"
#include "simd_internal.h"

HWY_BEFORE_NAMESPACE();
namespace mxtrain::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Rows of the register tile: as many as the register file holds with 2 B vectors and a
// broadcast beside the 2 kMr accumulators (32 vector registers on AVX-512, 16 below).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int64_t kMr = 14;
#else
constexpr int64_t kMr = 6;
#endif
// K chunk: a B micro-panel (kKc x kNr floats) stays in L1 while A micro-panels stream past
// it: 16 KiB on AVX2, 32 KiB on AVX-512.
constexpr int64_t kKc = 256;
static_assert(kKc % kMxBlock == 0, "K chunks hold whole MX blocks");
// A block per thread and K chunk, in L2: ~200 KiB of A micro-panels (a quarter of a Zen 2
// L2).
constexpr int64_t kABlockBytes = 200 * 1024;
// K chunks run back to back on each column of C tiles. Between two chunks a C tile makes a
// round trip (C = C + chunk sum); within a group that trip stays in L1 and L2, where chunk
// by chunk over the whole B panel it went to L3 or memory. That traffic held the AVX-512
// target at ~0.65 of its FMA peak: two chunks per group gave square_4096 388-439 against
// 462-475 ms and the layer shapes 4-14% (Sapphire Rapids, alternating, docs/benchmarks.md);
// four gained nothing, nor did two on AVX2 (half the FMA rate, so C's traffic weighs half).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int64_t kChunkGroup = 2;
#else
constexpr int64_t kChunkGroup = 1;
#endif
// A rowwise A is packed row-major (PackRowMajorPanels, read by MicroKernel<true>) when C
// has at most kRowMajorMaxCols columns, where each A value meets few columns and its pack
// weighs: the k-major pack runs 8- or 16-row byte transposes for 6- or 14-row panels,
// ~1.3 cycles an element on AVX2. One thread: AVX2 1024 x 128 x 128 fprop 339 -> 324 us,
// 512 x 512 x 128 637 -> 627; AVX-512 332 -> 326 and 1024 x 128 x 384 980 -> 962. At 2048^3
// row-major read 0-2% slower (within the noise, never faster): wide outputs keep k-major.
constexpr int64_t kRowMajorMaxCols = 512;
// Floats from one micro-panel to the next in a pack: kKc K steps of kPw values and a cache
// line, so that a columnwise pack's K step, which writes every panel, does not write
// them all into one or two L1 sets (panels of 6 x 256 floats lie 6 KiB apart).
constexpr int64_t kPanelPad = 16;
template <int64_t kPw>
constexpr int64_t kPanelFloats = kPanelPad + (kKc * kPw);
// Columns per B panel: at most 4096 (4 MiB of fp32 at kKc = 256), so that it stays in L3.
constexpr int64_t kNcMax = 4096;

// Columns of the register tile: 2 vectors (x86 vectors have a fixed width: MaxLanes is
// Lanes).
constexpr int64_t kNr = 2 * static_cast<int64_t>(hn::MaxLanes(D()));

// C[kMr x kNr] (row stride ldc) = acc (add: C + acc), acc = A micro-panel . B micro-panel
// over kc K steps; a: [kc][kMr], or with kRowMajorA [kMr][kKc] (row r's K steps at
// a + r kKc); b: [kc][kNr]; both 64-byte aligned. With c16, C's values
// plus bias (kNr floats, or null) go rounded to bf16 to c16 (row stride ldc) instead.
template <bool kRowMajorA>
HWY_INLINE void MicroKernel(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t kc,
                            float* HWY_RESTRICT c, int64_t ldc, bool add,
                            uint16_t* HWY_RESTRICT c16 = nullptr,
                            const float* HWY_RESTRICT bias = nullptr) {
  MXTRAIN_DCHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0 &&
                 reinterpret_cast<uintptr_t>(b) % 64 == 0);
  MXTRAIN_DCHECK(kc > 0 && ldc >= kNr && kNr == 2 * static_cast<int64_t>(hn::Lanes(D())));
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  V acc[kMr][2];
#pragma GCC unroll 16
  for (int64_t r = 0; r < kMr; ++r) {
    acc[r][0] = hn::Zero(d);
    acc[r][1] = hn::Zero(d);
    // C's rows are far apart and long evicted: fetch them while the K loop runs, or each
    // tile's kMr row misses at the end stall it (the K loop is only ~kc x kMr / 2 cycles).
    hwy::Prefetch(c + r * ldc);
    hwy::Prefetch(c + r * ldc + 2 * n - 1);
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    if constexpr (!kRowMajorA) hwy::Prefetch(a + k * kMr + 128);
    const V b0 = hn::Load(d, b + k * 2 * n);
    const V b1 = hn::Load(d, b + k * 2 * n + n);
#pragma GCC unroll 16
    for (int64_t r = 0; r < kMr; ++r) {
      const V av = hn::Set(d, kRowMajorA ? a[r * kKc + k] : a[k * kMr + r]);
      acc[r][0] = hn::MulAdd(av, b0, acc[r][0]);
      acc[r][1] = hn::MulAdd(av, b1, acc[r][1]);
    }
  }
  // C (+ the C already there), then for a bf16 result + bias and the rounding, as
  // FinishGemm does them.
#if HWY_TARGET != HWY_SCALAR  // (no vector rounding there: c16 stays null)
  const V bias0 = bias != nullptr ? hn::LoadU(d, bias) : hn::Zero(d);
  const V bias1 = bias != nullptr ? hn::LoadU(d, bias + n) : hn::Zero(d);
#endif
#pragma GCC unroll 16
  for (int64_t r = 0; r < kMr; ++r) {
    float* cr = c + r * ldc;
    V v0 = acc[r][0], v1 = acc[r][1];
    if (add) {
      v0 = hn::Add(hn::LoadU(d, cr), v0);
      v1 = hn::Add(hn::LoadU(d, cr + n), v1);
    }
#if HWY_TARGET != HWY_SCALAR
    if (c16 != nullptr) {
      if (bias != nullptr) {
        v0 = hn::Add(v0, bias0);
        v1 = hn::Add(v1, bias1);
      }
      StoreBf16(d, v0, c16 + r * ldc);
      StoreBf16(d, v1, c16 + r * ldc + n);
      continue;
    }
#endif
    hn::StoreU(v0, d, cr);
    hn::StoreU(v1, d, cr + n);
  }
}

// Decoded values, element code -> fp32 and scale byte -> 2^(b - 127).
struct DecodeTables {
  std::array<float, 256> value;
  std::array<float, 256> scale;
  explicit DecodeTables(ElementFormat f) {
    for (int c = 0; c < 256; ++c) {
      value[c] = DecodeElement(f, static_cast<uint8_t>(c));
      scale[c] = DecodeE8M0(static_cast<uint8_t>(c));
    }
  }
};

// The tables of format f, built once (512 scalar decodes: microseconds a call before).
const DecodeTables& DecodeTablesOf(ElementFormat f) {
  static const DecodeTables e4m3(ElementFormat::kE4M3), e5m2(ElementFormat::kE5M2);
  return f == ElementFormat::kE4M3 ? e4m3 : e5m2;
}

// Rows (or K steps) ahead of the one packed whose codes are prefetched.
constexpr int64_t kAhead = 8;

// Lanes() scale bytes as their fp32 factors 2^(b - 127); false, and `factor` unset, if any
// is 0 or 255 (not a normal fp32, or NaN: the tables handle those lanes).
HWY_INLINE bool ScaleFactors(const uint8_t* HWY_RESTRICT scales, V& factor) {
  const D d;
  const hn::RebindToSigned<D> di;
  const auto b = hn::PromoteTo(di, hn::LoadU(hn::Rebind<uint8_t, D>(), scales));
  const auto special = hn::Or(hn::Eq(b, hn::Zero(di)), hn::Eq(b, hn::Set(di, 0xFF)));
  if (HWY_UNLIKELY(!hn::AllFalse(di, special))) return false;
  factor = hn::BitCast(d, hn::ShiftLeft<23>(b));
  return true;
}

// Lanes() codes to fp32 times `factor` (ScaleFactors), as the tables give them (value[code]
// * scale[byte], the same two exact factors and the same product), built from the bits. No
// denormal is formed on the way, so a caller's flush-to-zero or denormals-are-zero mode
// changes nothing. False, and nothing stored, if any lane is a NaN or infinity code (E4M3
// has only NaN, magnitude 0x7F; E5M2 infinity 0x7C and NaN 0x7D-0x7F).
template <ElementFormat kFormat>
HWY_INLINE bool DecodeTimes(const uint8_t* HWY_RESTRICT codes, V factor, float* HWY_RESTRICT out) {
  const D d;
  constexpr bool kE4M3 = kFormat == ElementFormat::kE4M3;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  // F16C (every x86 target from AVX2 up): a code is the top of an fp16 pattern. E5M2 is
  // fp16's top byte as it is; E4M3's exponent and mantissa shifted into fp16's (the sign
  // carried from bit 14 to 15) are the value times 2^-8, normal and subnormal codes alike
  // (fp16 has one more exponent bit and seven more mantissa bits). vcvtph2ps converts an
  // fp16 subnormal to the exact fp32 normal (the kernels run without denormals-are-zero,
  // fp_env.h, and F16C does not apply it to fp16 inputs: checked on Zen 4), so times 2^8
  // each value is the tables' exactly. Four vector uops fewer per vector than the integer
  // form below: 1024 x 128 x 128, min of 1000 calls, one AVX2 thread fprop 352 -> 347 us
  // and wgrad 401 -> 392; two threads within 1% on AVX2, fprop 175 -> 172 on AVX-512.
  const hn::Rebind<uint16_t, D> d16;
  const auto c = hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, D>(), codes));
  const auto special = hn::Set(d16, kE4M3 ? 0x7F : 0x7C);  // all these bits: NaN or Inf
  if (HWY_UNLIKELY(!hn::AllFalse(d16, hn::Eq(hn::And(c, special), special)))) return false;
  hn::Vec<decltype(d16)> half;
  if constexpr (kE4M3) {
    const auto t = hn::ShiftLeft<7>(c);  // the sign lands on bit 14: carried to 15
    half = hn::Add(t, hn::And(t, hn::Set(d16, 0x4000)));
  } else {
    half = hn::ShiftLeft<8>(c);
  }
  V value = hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), half));
  if constexpr (kE4M3) value = hn::Mul(value, hn::Set(d, 256.0f));
#else
  // A normal code's exponent and mantissa shifted into place and rebased, a subnormal one
  // (exponent field 0) converted from its integer mantissa and scaled, the sign OR-ed in.
  const hn::RebindToSigned<D> di;
  constexpr int kMantBits = kE4M3 ? 3 : 2;
  constexpr int kBias = kE4M3 ? 7 : 15;
  constexpr int kFirstSpecial = kE4M3 ? 0x7F : 0x7C;  // magnitudes from here on
  const auto c = hn::PromoteTo(di, hn::LoadU(hn::Rebind<uint8_t, D>(), codes));
  const auto mag = hn::And(c, hn::Set(di, 0x7F));
  if (HWY_UNLIKELY(!hn::AllFalse(di, hn::Gt(mag, hn::Set(di, kFirstSpecial - 1))))) return false;
  // Normal: exponent field e and mantissa m at fp32's mantissa top, exponent rebased by
  // 127 - kBias. Subnormal (e = 0): m * 2^(1 - kBias - kMantBits), exact in fp32.
  const auto normal_bits =
      hn::Add(hn::ShiftLeft<23 - kMantBits>(mag), hn::Set(di, (127 - kBias) << 23));
  const V sub = hn::Mul(hn::ConvertTo(d, mag), hn::Set(d, 1.0f / (1 << (kBias - 1 + kMantBits))));
  const auto is_sub = hn::RebindMask(d, hn::Lt(mag, hn::Set(di, 1 << kMantBits)));
  const V magnitude = hn::IfThenElse(is_sub, sub, hn::BitCast(d, normal_bits));
  const V value =
      hn::Or(magnitude, hn::BitCast(d, hn::ShiftLeft<24>(hn::And(c, hn::Set(di, 0x80)))));
#endif
  hn::StoreU(hn::Mul(value, factor), d, out);
  return true;
}

// Vectors that cover a panel's kPw values of one K step (the last one runs SpillFloats floats
// past them), and the floats PackColumnwise needs in `step` for `panels` panels: a scale
// factor vector for each of those vectors in the current MX block, and a byte each saying
// whether it holds (no scale byte 0 or 255 among its lanes).
constexpr int64_t kMaxLanes = static_cast<int64_t>(hn::MaxLanes(D()));
template <int64_t kPw>
constexpr int64_t kStepVecs = (kPw + kMaxLanes - 1) / kMaxLanes;
template <int64_t kPw>
constexpr int64_t SpillFloats() {
  return kMaxLanes * kStepVecs<kPw> - kPw;
}
template <int64_t kPw>
constexpr int64_t ColumnwiseStepFloats(int64_t panels) {
  return panels * kStepVecs<kPw> * (kMaxLanes + 1);
}

// One K step of panels [0, fast) of a columnwise operand: each panel's kPw values from
// kStepVecs whole vectors of codes at its first column, with the block's factors
// (`factors`, a vector per panel and vector; with kCheckHolds, `holds` says which are
// ScaleFactors-normal, else all are), stored straight into the panel; the last vector's SpillFloats
// land on the first of the panel's next K step, which is written after it (after the last K step,
// in the panel's pad). A panel with a factor that does not hold, or a vector DecodeTimes declines,
// takes the tables.
template <ElementFormat kFormat, int64_t kPw, bool kCheckHolds>
HWY_INLINE void DecodeStepToPanels(const uint8_t* HWY_RESTRICT codes,
                                   const uint8_t* HWY_RESTRICT scales,
                                   const float* HWY_RESTRICT factors,
                                   const uint8_t* HWY_RESTRICT holds, int64_t fast,
                                   const DecodeTables& t, float* HWY_RESTRICT dst_k) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t p = 0; p < fast; ++p) {
    float* out = dst_k + p * kPanelFloats<kPw>;
    const uint8_t* c = codes + p * kPw;
    for (int64_t j = 0; j < kStepVecs<kPw>; ++j) {
      const int64_t v = p * kStepVecs<kPw> + j;
      if (HWY_UNLIKELY(
              (kCheckHolds && !holds[v]) ||
              !DecodeTimes<kFormat>(c + j * n, hn::LoadU(d, factors + v * n), out + j * n))) {
        const uint8_t* sc = scales + p * kPw;
        for (int64_t i = 0; i < kPw; ++i) out[i] = t.value[c[i]] * t.scale[sc[i]];
        break;
      }
    }
  }
}

// Micro-panels [f0 + p kPw, f0 + (p + 1) kPw) for p < panels of a columnwise operand over
// K [k0, k0 + kc), each as dst[p kPanelFloats + k kPw + i] (the layout of PackPanel, below),
// K step by K step: each step's codes of all the panels are one run of a storage row, read
// once and in order, where a panel at a time crossed kc rows per panel, one line each.
// Each MX block's scale factors are worked out once (32 K steps), and each panel's values
// are decoded from whole vectors at its first column straight into place
// (DecodeStepToPanels); the panels whose vectors would read past the operand's row take
// the tables. (A's 6- and 14-wide panels had gone through a row buffer and a copy each,
// whose loads, straddling the decode's vector stores, stalled on store forwarding.)
// `step`: ColumnwiseStepFloats(panels). Rows past op.free and K past op.s are zero.
template <int64_t kPw>
void PackColumnwise(const GemmOperand& op, const DecodeTables& t, int64_t f0, int64_t panels,
                    int64_t k0, int64_t kc, float* HWY_RESTRICT dst, float* HWY_RESTRICT step) {
  MXTRAIN_DCHECK(op.contract_rows && k0 % kMxBlock == 0 && k0 < op.s);
  MXTRAIN_DCHECK(0 <= f0 && f0 < op.free && panels > 0 && 0 < kc && kc <= kKc);
  static_assert(SpillFloats<kPw>() <= kPw && SpillFloats<kPw>() <= kPanelPad,
                "a spill stays inside the next K step's values or the panel's pad");
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const int64_t k_end = std::min(kc, op.s - k0);
  const int64_t span = std::min(panels * kPw, op.free - f0);
  // Panels whose vectors stay inside the row: f0 + p kPw + kStepVecs n <= op.free.
  const int64_t reach = op.free - f0 - kStepVecs<kPw> * n;
  const int64_t fast = reach < 0 ? 0 : std::min(panels, reach / kPw + 1);
  float* factors = step;
  uint8_t* holds = reinterpret_cast<uint8_t*>(step + panels * kStepVecs<kPw> * n);
  bool all_hold = true;
  for (int64_t k = 0; k < kc; ++k) {
    float* dst_k = dst + k * kPw;
    if (k >= k_end) {
      for (int64_t p = 0; p < panels; ++p) {
        std::fill(dst_k + p * kPanelFloats<kPw>, dst_k + p * kPanelFloats<kPw> + kPw, 0.0f);
      }
      continue;
    }
    const uint8_t* codes = op.data + (k0 + k) * op.free + f0;
    const uint8_t* scales = op.scales + ((k0 + k) / kMxBlock) * op.free + f0;
    if (k + kAhead < k_end) {
      for (int64_t l = 0; l < span; l += 64) hwy::Prefetch(codes + kAhead * op.free + l);
    }
    if ((k0 + k + kAhead) % kMxBlock == 0 && k + kAhead < k_end) {  // the next scale row
      for (int64_t l = 0; l < span; l += 64) hwy::Prefetch(scales + op.free + l);
    }
    if (k % kMxBlock == 0) {  // a new block (k0 is a block's first K step)
      all_hold = true;
      for (int64_t v = 0; v < fast * kStepVecs<kPw>; ++v) {
        const int64_t p = v / kStepVecs<kPw>, j = v % kStepVecs<kPw>;
        V factor = hn::Zero(d);
        holds[v] = ScaleFactors(scales + p * kPw + j * n, factor);
        all_hold &= holds[v] != 0;
        hn::StoreU(factor, d, factors + v * n);
      }
    }
    const bool e4m3 = op.format == ElementFormat::kE4M3;
    if (e4m3 && all_hold) {
      DecodeStepToPanels<ElementFormat::kE4M3, kPw, false>(codes, scales, factors, holds, fast, t,
                                                           dst_k);
    } else if (e4m3) {
      DecodeStepToPanels<ElementFormat::kE4M3, kPw, true>(codes, scales, factors, holds, fast, t,
                                                          dst_k);
    } else if (all_hold) {
      DecodeStepToPanels<ElementFormat::kE5M2, kPw, false>(codes, scales, factors, holds, fast, t,
                                                           dst_k);
    } else {
      DecodeStepToPanels<ElementFormat::kE5M2, kPw, true>(codes, scales, factors, holds, fast, t,
                                                          dst_k);
    }
    // The panels past `fast`: their columns inside the row from the tables, the rest 0.
    for (int64_t w = fast * kPw; w < panels * kPw; ++w) {
      dst_k[(w / kPw) * kPanelFloats<kPw> + w % kPw] =
          w < span ? t.value[codes[w]] * t.scale[scales[w]] : 0.0f;
    }
  }
}

#if HWY_TARGET != HWY_SCALAR
using Codes = hn::Vec<hn::Full128<uint8_t>>;

// One round of a byte transpose: out[j][2i] and out[j][2i + 1] are the lower and upper
// interleaves, in lanes of dw, of in[2j][i] and in[2j + 1][i]. A vector of `in` holds
// kSteps K steps of some rows, each step one lane of dw / 2; one of `out`, half the steps
// of twice the rows.
template <class DW, size_t kGroups, size_t kSteps>
HWY_INLINE void InterleaveRound(DW dw, const Codes (&in)[2 * kGroups][kSteps],
                                Codes (&out)[kGroups][2 * kSteps]) {
  const hn::Full128<uint8_t> d8;
  for (size_t j = 0; j < kGroups; ++j) {
    for (size_t i = 0; i < kSteps; ++i) {
      const auto a = hn::BitCast(dw, in[2 * j][i]), b = hn::BitCast(dw, in[2 * j + 1][i]);
      out[j][2 * i] = hn::BitCast(d8, hn::InterleaveLower(dw, a, b));
      out[j][2 * i + 1] = hn::BitCast(d8, hn::InterleaveUpper(dw, a, b));
    }
  }
}

// The 16 x 16 (kRows = 16) or 8 x 16 (kRows = 8) block of codes v[r][0] = 16 codes of row
// r (K steps 0..15), written K-major: out[k * kRows + r]. Rounds of interleaves of bytes,
// then of 2, 4 (and 8) bytes, each doubling the rows a lane holds.
template <size_t kRows>
HWY_INLINE void TransposeCodes(const Codes (&v)[kRows][1], uint8_t* HWY_RESTRICT out) {
  const hn::Full128<uint8_t> d8;
  Codes s1[kRows / 2][2], s2[kRows / 4][4], s3[kRows / 8][8];
  InterleaveRound(d8, v, s1);  // rows 2j, 2j+1; K steps 8h .. 8h+7 in s1[j][h]
  InterleaveRound(hn::Full128<uint16_t>(), s1, s2);  // 4 rows; K steps 4q .. 4q+3
  InterleaveRound(hn::Full128<uint32_t>(), s2, s3);  // 8 rows; K steps 2e, 2e+1
  if constexpr (kRows == 8) {
    for (size_t e = 0; e < 8; ++e) hn::StoreU(s3[0][e], d8, out + e * 16);
  } else {
    Codes s4[1][16];
    InterleaveRound(hn::Full128<uint64_t>(), s3, s4);  // 16 rows; K step k in s4[0][k]
    for (size_t k = 0; k < 16; ++k) hn::StoreU(s4[0][k], d8, out + k * 16);
  }
}

// Zero codes for the rows of a group past the panel or past op.free (code 0 is +0 in both
// formats), and the scale byte they take (1.0: decodes as the vector path's normal case).
alignas(64) constexpr uint8_t kZeroCodes[kKc] = {};
constexpr uint8_t kUnitScale = 127;

// Rows [f0 + g, f0 + g + kRows) of a rowwise operand, `valid` of them (the rest of the group
// lies past the panel), over K steps [0, k16) of the chunk at k0 (k16 a multiple of 16):
// dst[k * width + g + r] for r < valid. Codes are transposed 16 K steps at a time, then
// decoded a vector at a time (DecodeTimes) with the rows' scale factors of the block
// (ScaleFactors, once per block; the tables where either declines a lane). Each K step's
// last vector may run up to Lanes() - 1 floats past its `valid` ones, onto the next K
// step's (written next) or past the panel's last: the caller leaves room there and writes
// what follows afterwards.
template <int64_t kRows, ElementFormat kFormat>
HWY_INLINE void PackRowGroup(const GemmOperand& op, const DecodeTables& t, int64_t f0, int64_t g,
                             int64_t valid, int64_t width, int64_t k0, int64_t k16,
                             float* HWY_RESTRICT dst) {
  const hn::Full128<uint8_t> d8;
  const int64_t n = static_cast<int64_t>(hn::Lanes(D()));
  const uint8_t* rows[kRows];
  const uint8_t* row_scales[kRows];
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t f = f0 + g + r;
    const bool real = r < valid && f < op.free;
    rows[r] = real ? op.data + f * op.s + k0 : kZeroCodes;
    row_scales[r] = real ? op.scales + f * op.blocks + k0 / kMxBlock : nullptr;  // zero codes
  }
  alignas(64) uint8_t codes[16 * kRows];
  alignas(64) uint8_t scales[kRows];
  const int64_t vecs = CeilDiv(valid, n);
  // Each vector's scale factors, the same for the 32 K steps of a block; whether all were.
  V factors[kRows];
  bool factors_ok = false;
  for (int64_t k = 0; k < k16; k += 16) {
    if (k % kMxBlock == 0) {
      const int64_t kb = k / kMxBlock;
      for (int64_t r = 0; r < kRows; ++r) {
        scales[r] = row_scales[r] != nullptr ? row_scales[r][kb] : kUnitScale;
      }
      factors_ok = true;
      for (int64_t i = 0; i < vecs; ++i) factors_ok &= ScaleFactors(scales + i * n, factors[i]);
    }
    Codes v[kRows][1];
    for (int64_t r = 0; r < kRows; ++r) v[r][0] = hn::LoadU(d8, rows[r] + k);
    TransposeCodes<kRows>(v, codes);
    for (int64_t kk = 0; kk < 16; ++kk) {
      float* out = dst + (k + kk) * width + g;
      const uint8_t* c = codes + kk * kRows;
      for (int64_t i = 0; i < vecs; ++i) {
        if (!factors_ok || !DecodeTimes<kFormat>(c + i * n, factors[i], out + i * n)) {
          for (int64_t l = i * n; l < std::min(valid, (i + 1) * n); ++l) {
            out[l] = t.value[c[l]] * t.scale[scales[l]];
          }
        }
      }
    }
  }
}
#endif  // HWY_TARGET != HWY_SCALAR

// Floats a rowwise pack may write past the end of its panel (PackRowGroup): pack buffers
// leave this much room after their last panel.
constexpr int64_t kPackSpill = static_cast<int64_t>(hn::MaxLanes(D()));

// Logical rows [f0, f0 + width) of a rowwise operand over K [k0, k0 + kc) as
// dst[k][width] (decoded, scales folded in); rows past op.free and K past op.s are zero.
// Groups of 16 rows (8 for panels of at most 8) go through PackRowGroup, 16 K steps at a
// time; the K steps past the last multiple of 16, and the SCALAR target, element by element.
// Writes up to kPackSpill floats past dst[kc * width).
void PackPanel(const GemmOperand& op, const DecodeTables& t, int64_t f0, int64_t width, int64_t k0,
               int64_t kc, float* HWY_RESTRICT dst) {
  MXTRAIN_DCHECK(k0 % kMxBlock == 0 && k0 < op.s);  // one scale per 32 codes from k0 on
  MXTRAIN_DCHECK(0 <= f0 && f0 < op.free && width > 0 && 0 < kc && kc <= kKc);
  MXTRAIN_DCHECK(!op.contract_rows);
  const int64_t k_end = std::min(kc, op.s - k0);  // valid K steps
  // A row's codes for one chunk are only 4 cache lines, too short a stream for the hardware
  // prefetchers: fetch those of the rows kAhead on.
  for (int64_t f = f0 + kAhead; f < std::min(op.free, f0 + width + kAhead); ++f) {
    for (int64_t l = 0; l < k_end; l += 64) hwy::Prefetch(op.data + f * op.s + k0 + l);
  }
  int64_t k16 = 0;  // K steps packed by PackRowGroup
  // Only the last row group may run past its K step (groups before it are whole), so no
  // group writes over one already packed.
  MXTRAIN_DCHECK(width <= 16 || width % 16 == 0);
#if HWY_TARGET != HWY_SCALAR
  k16 = k_end / 16 * 16;
  // 8-row groups where a vector holds at most 8 lanes (they are decoded from 8-byte runs).
  constexpr bool kEightRows = hn::MaxLanes(D()) <= 8;
  for (int64_t g = 0; g < width && k16 > 0; g += 16) {
    const int64_t valid = std::min<int64_t>(16, width - g);
    const bool e4m3 = op.format == ElementFormat::kE4M3;
    if (kEightRows && valid <= 8 && e4m3) {
      PackRowGroup<8, ElementFormat::kE4M3>(op, t, f0, g, valid, width, k0, k16, dst);
    } else if (kEightRows && valid <= 8) {
      PackRowGroup<8, ElementFormat::kE5M2>(op, t, f0, g, valid, width, k0, k16, dst);
    } else if (e4m3) {
      PackRowGroup<16, ElementFormat::kE4M3>(op, t, f0, g, valid, width, k0, k16, dst);
    } else {
      PackRowGroup<16, ElementFormat::kE5M2>(op, t, f0, g, valid, width, k0, k16, dst);
    }
  }
#endif
  for (int64_t w = 0; w < width; ++w) {
    const int64_t f = f0 + w;
    if (f >= op.free) {
      for (int64_t k = k16; k < kc; ++k) dst[k * width + w] = 0.0f;
      continue;
    }
    const uint8_t* codes = op.data + f * op.s + k0;
    const uint8_t* scales = op.scales + f * op.blocks;
    for (int64_t k = k16; k < k_end; ++k) {
      dst[k * width + w] = t.value[codes[k]] * t.scale[scales[(k0 + k) / kMxBlock]];
    }
    for (int64_t k = k_end; k < kc; ++k) dst[k * width + w] = 0.0f;
  }
}

// Micro-panels [p0, p1) of kPw rows of A (kMr) or columns of B (kNr) over K [k0, k0 + kc)
// into dst (micro-panel p at dst + (p - p0) kPanelFloats): a columnwise operand a K step at a
// time across the panels, a rowwise one panel by panel.
template <int64_t kPw>
HWY_INLINE void PackPanels(const GemmOperand& op, const DecodeTables& t, int64_t p0, int64_t p1,
                           int64_t k0, int64_t kc, float* dst, float* step) {
  if (op.contract_rows) {
    PackColumnwise<kPw>(op, t, p0 * kPw, p1 - p0, k0, kc, dst, step);
    return;
  }
  for (int64_t ip = p0; ip < p1; ++ip) {
    PackPanel(op, t, ip * kPw, kPw, k0, kc, dst + (ip - p0) * kPanelFloats<kPw>);
  }
}

// count codes of one logical row of a rowwise operand, from the start of an MX block
// (scales: that block's byte and those after it), decoded with their scales folded in:
// a block's vectors with its factor (ScaleFactors' test on one byte), the tables for a
// scale byte of 0 or 255 and for vectors DecodeTimes declines, and for the last values
// when count is not a whole number of vectors.
template <ElementFormat kFormat>
HWY_INLINE void DecodeRowwiseRun(const uint8_t* HWY_RESTRICT codes,
                                 const uint8_t* HWY_RESTRICT scales, int64_t count,
                                 const DecodeTables& t, float* HWY_RESTRICT out) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t k0 = 0; k0 < count; k0 += kMxBlock) {
    const uint8_t byte = scales[k0 / kMxBlock];
    const int64_t k1 = std::min(count, k0 + kMxBlock);
    int64_t k = k0;
    if (byte != 0 && byte != 0xFF) {
      const V factor = hn::BitCast(d, hn::Set(hn::RebindToSigned<D>(), int32_t{byte} << 23));
      for (; k + n <= k1; k += n) {
        if (!DecodeTimes<kFormat>(codes + k, factor, out + k)) {
          for (int64_t i = k; i < k + n; ++i) out[i] = t.value[codes[i]] * t.scale[byte];
        }
      }
    }
    for (; k < k1; ++k) out[k] = t.value[codes[k]] * t.scale[byte];
  }
}

// Micro-panels [p0, p1) of kMr rows of a rowwise A over K [k0, k0 + kc), row-major for
// MicroKernel<true>: panel p's row r at dst + (p - p0) kPanelFloats + r kKc, K steps
// [0, kc) (zero past op.s; rows past op.free all zero). Each row is one run of its storage
// row, decoded by vectors as it lies: no transpose, every lane a real value (PackPanel's
// k-major panels go through 8- or 16-row byte transposes for 6 or 14 rows).
void PackRowMajorPanels(const GemmOperand& op, const DecodeTables& t, int64_t p0, int64_t p1,
                        int64_t k0, int64_t kc, float* HWY_RESTRICT dst) {
  MXTRAIN_DCHECK(!op.contract_rows && k0 % kMxBlock == 0 && k0 < op.s);
  MXTRAIN_DCHECK(0 <= p0 && p0 < p1 && 0 < kc && kc <= kKc);
  const int64_t k_end = std::min(kc, op.s - k0);
  for (int64_t f = p0 * kMr; f < p1 * kMr; ++f) {
    float* out = dst + (f / kMr - p0) * kPanelFloats<kMr> + (f % kMr) * kKc;
    if (f >= op.free) {
      std::fill(out, out + kc, 0.0f);
      continue;
    }
    const uint8_t* codes = op.data + f * op.s + k0;
    const uint8_t* scales = op.scales + f * op.blocks + k0 / kMxBlock;
    if (f + kAhead < op.free) {  // a row's chunk is a few lines: too short for the prefetchers
      for (int64_t l = 0; l < k_end; l += 64) hwy::Prefetch(codes + kAhead * op.s + l);
    }
    if (op.format == ElementFormat::kE4M3) {
      DecodeRowwiseRun<ElementFormat::kE4M3>(codes, scales, k_end, t, out);
    } else {
      DecodeRowwiseRun<ElementFormat::kE5M2>(codes, scales, k_end, t, out);
    }
    std::fill(out + k_end, out + kc, 0.0f);
  }
}

// Whether p's A is packed row-major (kRowMajorMaxCols above).
bool RowMajorA(const GemmProblem& p) { return !p.a.contract_rows && p.b.free <= kRowMajorMaxCols; }

// A's micro-panels [p0, p1) over K [k0, k0 + kc) at dst (kPanelFloats<kMr> each): row-major
// where `row_major` (RowMajorA; PackRowMajorPanels, read by MicroKernel<true>), else
// k-major (PackPanels or PackColumnwise; MicroKernel<false>).
HWY_INLINE void PackA(const GemmOperand& a, const DecodeTables& t, int64_t p0, int64_t p1,
                      int64_t k0, int64_t kc, bool row_major, float* dst, float* step) {
  if (row_major) {
    PackRowMajorPanels(a, t, p0, p1, k0, kc, dst);
  } else {
    PackPanels<kMr>(a, t, p0, p1, k0, kc, dst, step);
  }
}

// The h x w block of C at c (row stride ldc; h <= kMr, w <= kNr) = the micro-panels' product
// over kc K steps, added to C where `add`; with c16, rounded (plus bias) to bf16 there
// instead (MicroKernel). A partial block goes through a buffer.
template <bool kRowMajorA>
HWY_INLINE void ComputeBlock(const float* a, const float* b, int64_t kc, int64_t h, int64_t w,
                             float* c, int64_t ldc, bool add, uint16_t* c16 = nullptr,
                             const float* bias = nullptr) {
  if (h == kMr && w == kNr) {
    MicroKernel<kRowMajorA>(a, b, kc, c, ldc, add, c16, bias);
    return;
  }
  alignas(64) float edge[kMr * 2 * HWY_MAX_BYTES / sizeof(float)];
  MicroKernel<kRowMajorA>(a, b, kc, edge, kNr, false);
  for (int64_t r = 0; r < h; ++r) {
    for (int64_t j = 0; j < w; ++j) {
      const float out = add ? c[r * ldc + j] + edge[r * kNr + j] : edge[r * kNr + j];
      if (c16 == nullptr) {
        c[r * ldc + j] = out;
      } else {
        c16[r * ldc + j] = F32ToBf16(bias != nullptr ? out + bias[j] : out);
      }
    }
  }
}

// The K chunks split between the threads instead of C's rows, for small outputs over a
// long K (the main job's weight gradients: 128 x 128 and 256 x 128 over 1024 tokens,
// where splitting the rows gave each thread ~11 micro-panels of rows per chunk and a
// barrier per chunk). The first thread takes the first chunks and adds them into C itself,
// as one thread would; every other thread sums its chunks over all of C, each chunk into
// its own partial of C's shape; then the threads add the partials into C row by row, in
// chunk order. MicroKernel sums a chunk from zero and adds it to C, so each element is
// formed as the one-thread schedule forms it (C + chunk 0's sum + chunk 1's ...): the same
// bytes on every thread count. Partials of at most kSplitKBytes in all, outputs of at most
// kSplitKOutput elements; fp32 results only (a bf16 result is rounded in the kernel).
constexpr int64_t kSplitKBytes = 4 << 20;
constexpr int64_t kSplitKOutput = 256 * 256;

bool UsesSplitK(const GemmProblem& p) {
  const int64_t chunks = CeilDiv(p.a.s, kKc);
  const int64_t output = p.a.free * p.b.free;
  return p.threads > 1 && p.bf16_out == nullptr && chunks >= p.threads && p.b.free <= kNcMax &&
         output <= kSplitKOutput &&
         output * chunks * static_cast<int64_t>(sizeof(float)) <= kSplitKBytes;
}

void RunGemmSplitK(const GemmProblem& p, const std::vector<uint8_t>& block_ok,
                   const DecodeTables& ta, const DecodeTables& tb) {
  const int64_t nr = kNr;
  const int64_t rows = p.a.free, cols = p.b.free, s = p.a.s;
  const int64_t blocks_j = CeilDiv(cols, nr);
  const int64_t row_panels = CeilDiv(rows, kMr), col_panels = blocks_j;
  const int64_t mc_panels = std::max<int64_t>(1, kABlockBytes / (kMr * kKc * 4));
  const int64_t chunks = CeilDiv(s, kKc);
  const int64_t plane = rows * cols;
  const bool row_major_a = RowMajorA(p);
  // At most the chunks past the first thread's share (the team may be smaller than asked).
  Tensor partials = Tensor::Empty(DType::kF32, {(chunks - chunks / p.threads) * plane},
                                  MemoryCategory::kWorkspace);
  float* part = partials.mutable_data<float>();

#pragma omp parallel num_threads(p.threads)
  {
    const internal::ScopedFpEnv fp_env;
    Tensor b_pack = Tensor::Empty(DType::kF32, {col_panels * kPanelFloats<kNr> + kPackSpill},
                                  MemoryCategory::kWorkspace);
    Tensor a_pack = Tensor::Empty(DType::kF32, {mc_panels * kPanelFloats<kMr> + kPackSpill},
                                  MemoryCategory::kWorkspace);
    Tensor step = Tensor::Empty(
        DType::kF32,
        {std::max(ColumnwiseStepFloats<kNr>(col_panels), ColumnwiseStepFloats<kMr>(mc_panels))},
        MemoryCategory::kWorkspace);
    float* bp = b_pack.mutable_data<float>();
    float* ap = a_pack.mutable_data<float>();
    MXTRAIN_DCHECK(reinterpret_cast<uintptr_t>(bp) % 64 == 0 &&
                   reinterpret_cast<uintptr_t>(ap) % 64 == 0);
    // Chunks [0, direct) go straight into C (the first thread's share, as ThreadShare splits
    // them); chunk g >= direct into partial g - direct.
    const int64_t direct = chunks / omp_get_num_threads();
    const ThreadShare my_chunks(chunks);
    MXTRAIN_DCHECK(omp_get_thread_num() > 0 || my_chunks.end == direct);
    for (int64_t g = my_chunks.begin; g < my_chunks.end; ++g) {
      const int64_t k0 = g * kKc, kc = std::min(kKc, s - k0);
      const bool into_c = g < direct;
      const bool add = into_c && (k0 > 0 || !p.overwrite);
      float* pg = into_c ? p.c : part + (g - direct) * plane;
      PackPanels<kNr>(p.b, tb, 0, col_panels, k0, kc, bp, step.mutable_data<float>());
      for (int64_t ic = 0; ic < row_panels; ic += mc_panels) {
        const int64_t ic_end = std::min(row_panels, ic + mc_panels);
        PackA(p.a, ta, ic, ic_end, k0, kc, row_major_a, ap, step.mutable_data<float>());
        for (int64_t jp = 0; jp < col_panels; ++jp) {
          for (int64_t ip = ic; ip < ic_end; ++ip) {
            if (!block_ok[ip * blocks_j + jp]) continue;
            const int64_t i0 = ip * kMr, j0 = jp * nr;
            const float* a = ap + (ip - ic) * kPanelFloats<kMr>;
            const float* b = bp + jp * kPanelFloats<kNr>;
            const int64_t h = std::min(kMr, rows - i0), w = std::min(nr, cols - j0);
            float* c = pg + i0 * cols + j0;
            if (row_major_a) {
              ComputeBlock<true>(a, b, kc, h, w, c, cols, add);
            } else {
              ComputeBlock<false>(a, b, kc, h, w, c, cols, add);
            }
          }
        }
      }
    }
#pragma omp barrier
    // C (holding chunks [0, direct)) + the next chunk's sum + ..., over the blocks this path
    // computes (the others are the exact path's, untouched).
    const D d;
    const int64_t n = static_cast<int64_t>(hn::Lanes(d));
    const ThreadShare my_rows(rows);
    for (int64_t i = my_rows.begin; i < my_rows.end; ++i) {
      const uint8_t* ok = block_ok.data() + (i / kMr) * blocks_j;
      float* c = p.c + i * cols;
      const float* pi = part + i * cols;
      for (int64_t jp = 0; jp < blocks_j; ++jp) {
        if (!ok[jp]) continue;
        const int64_t j1 = std::min(cols, (jp + 1) * nr);
        int64_t j = jp * nr;
        for (; j + n <= j1; j += n) {
          V v = hn::LoadU(d, c + j);
          for (int64_t g = 0; g < chunks - direct; ++g) {
            v = hn::Add(v, hn::LoadU(d, pi + g * plane + j));
          }
          hn::StoreU(v, d, c + j);
        }
        for (; j < j1; ++j) {
          float v = c[j];
          for (int64_t g = 0; g < chunks - direct; ++g) v += pi[g * plane + j];
          c[j] = v;
        }
      }
    }
  }
}

void RunGemm(const GemmProblem& p, std::vector<uint8_t>& skipped) {
  const int64_t nr = kNr;
  const int64_t rows = p.a.free, cols = p.b.free, s = p.a.s;
  const std::vector<uint8_t> block_ok = PlanBlocks(p, kMr, nr, skipped);
  const int64_t blocks_j = CeilDiv(cols, nr);
  const int64_t row_panels = CeilDiv(rows, kMr), col_panels = blocks_j;
  const int64_t nc_panels = std::min(col_panels, kNcMax / nr);
  const int64_t mc_panels = std::max<int64_t>(1, kABlockBytes / (kMr * kKc * 4));
  const DecodeTables& ta = DecodeTablesOf(p.a.format);
  const DecodeTables& tb = DecodeTablesOf(p.b.format);
  if (UsesSplitK(p)) {
    RunGemmSplitK(p, block_ok, ta, tb);
    return;
  }
  // B panel of one (column block, K chunk): nc_panels micro-panels of [kKc][nr]; a group's
  // chunks one after another. A block likewise, per thread.
  const int64_t b_chunk = nc_panels * kPanelFloats<kNr>, a_chunk = mc_panels * kPanelFloats<kMr>;
  // One chunk at a time where a chunk's B panel and A block fit L2 and a group's would not:
  // B then stays in L2 for all the thread's A blocks (an expert of 1408 columns on one
  // thread: MoE FC1 fprop 5% slower with two).
  const int64_t chunk_bytes = (b_chunk + a_chunk) * static_cast<int64_t>(sizeof(float));
  const int64_t l2 = L2CacheBytes();
  const bool group_spills = chunk_bytes <= l2 && kChunkGroup * chunk_bytes > l2;
  const int64_t group = std::min(group_spills ? 1 : kChunkGroup, CeilDiv(s, kKc));
  // Rows split between threads when each gets at least two micro-panels of rows; else the
  // threads split the column micro-panels of each block (each packs the A rows it needs).
  const bool split_rows = row_panels >= 2 * p.threads;
  // With split rows and a small B, each thread packs all of B for itself, without
  // barriers (kPrivateBPackBytes, kernels.h).
  const int64_t b_bytes =
      col_panels * kPanelFloats<kNr> * CeilDiv(s, kKc) * static_cast<int64_t>(sizeof(float));
  const bool private_b = split_rows && p.threads > 1 && b_bytes <= kPrivateBPackBytes;
  Tensor b_pack = private_b ? Tensor()
                            : Tensor::Empty(DType::kF32, {group * b_chunk + kPackSpill},
                                            MemoryCategory::kWorkspace);
  // A bf16 result is rounded by the kernel from its C tiles' last K chunk (not on SCALAR,
  // whose MicroKernel has no vector rounding).
  const bool narrow = p.bf16_out != nullptr && HWY_TARGET != HWY_SCALAR;
  if (narrow) p.bf16_out->written = true;
  const bool row_major_a = RowMajorA(p);

#pragma omp parallel num_threads(p.threads)
  {
    const internal::ScopedFpEnv fp_env;
    Tensor a_pack =
        Tensor::Empty(DType::kF32, {group * a_chunk + kPackSpill}, MemoryCategory::kWorkspace);
    float* ap = a_pack.mutable_data<float>();
    Tensor own_b =  // this thread's B (private_b)
        private_b
            ? Tensor::Empty(DType::kF32, {group * b_chunk + kPackSpill}, MemoryCategory::kWorkspace)
            : Tensor();
    float* bp = (private_b ? own_b : b_pack).mutable_data<float>();
    MXTRAIN_DCHECK(reinterpret_cast<uintptr_t>(bp) % 64 == 0);  // micro-panels 64-aligned
    // One K step of the columnwise panels this thread packs (PackColumnwise).
    Tensor step = Tensor::Empty(
        DType::kF32,
        {std::max(ColumnwiseStepFloats<kNr>(nc_panels), ColumnwiseStepFloats<kMr>(mc_panels))},
        MemoryCategory::kWorkspace);
    const ThreadShare my_rows(row_panels);
    const int64_t rp0 = split_rows ? my_rows.begin : 0;
    const int64_t rp1 = split_rows ? my_rows.end : row_panels;
    for (int64_t jc = 0; jc < col_panels; jc += nc_panels) {
      const int64_t jc_end = std::min(col_panels, jc + nc_panels);
      // This thread's share of the block's column micro-panels: the B panels it packs
      // (unless private_b), and the columns it computes when the threads split the columns.
      const ThreadShare my_cols(jc_end - jc);
      const int64_t j0 = jc + my_cols.begin, j1 = jc + my_cols.end;
      const int64_t cp0 = split_rows ? jc : j0;
      const int64_t cp1 = split_rows ? jc_end : j1;
      // The column micro-panels of B this thread packs: all of them where private_b.
      const int64_t pj0 = private_b ? jc : j0, pj1 = private_b ? jc_end : j1;
      for (int64_t kg = 0; kg < s; kg += group * kKc) {
        const int64_t chunks = std::min(group, CeilDiv(s - kg, kKc));
        // Chunk g of the group: K [k0(g), k0(g) + kc(g)).
        const auto k0 = [&](int64_t g) { return kg + g * kKc; };
        const auto kc = [&](int64_t g) { return std::min(kKc, s - k0(g)); };
        for (int64_t g = 0; g < chunks; ++g) {
          float* bg = bp + g * b_chunk;
          if (p.b.contract_rows) {
            if (pj0 < pj1) {
              PackColumnwise<kNr>(p.b, tb, pj0 * nr, pj1 - pj0, k0(g), kc(g),
                                  bg + (pj0 - jc) * kPanelFloats<kNr>, step.mutable_data<float>());
            }
          } else {
            for (int64_t jp = pj0; jp < pj1; ++jp) {
              PackPanel(p.b, tb, jp * nr, nr, k0(g), kc(g), bg + (jp - jc) * kPanelFloats<kNr>);
            }
          }
        }
        if (!private_b) {
#pragma omp barrier
        }
        for (int64_t ic = rp0; ic < rp1; ic += mc_panels) {
          const int64_t ic_end = std::min(rp1, ic + mc_panels);
          for (int64_t g = 0; g < chunks; ++g) {
            PackA(p.a, ta, ic, ic_end, k0(g), kc(g), row_major_a, ap + g * a_chunk,
                  step.mutable_data<float>());
          }
          const auto tile = [&](int64_t ip, int64_t jp, int64_t g) {
            if (!block_ok[ip * blocks_j + jp]) return;
            const bool add = k0(g) > 0 || !p.overwrite;
            const float* b = bp + g * b_chunk + (jp - jc) * kPanelFloats<kNr>;
            const int64_t j0 = jp * nr, w = std::min(nr, cols - j0);
            const float* a = ap + g * a_chunk + (ip - ic) * kPanelFloats<kMr>;
            const int64_t i0 = ip * kMr, h = std::min(kMr, rows - i0);
            float* c = p.c + i0 * cols + j0;
            // The last K chunk of a bf16 result: rounded straight into it.
            const bool to_bf16 = narrow && k0(g) + kc(g) == s;
            uint16_t* c16 = to_bf16 ? p.bf16_out->data + i0 * cols + j0 : nullptr;
            const float* bias = to_bf16 && p.bf16_out->bias ? p.bf16_out->bias + j0 : nullptr;
            if (row_major_a) {
              ComputeBlock<true>(a, b, kc(g), h, w, c, cols, add, c16, bias);
            } else {
              ComputeBlock<false>(a, b, kc(g), h, w, c, cols, add, c16, bias);
            }
          };
          // B micro-panel outer (in L1), A micro-panels inner (from L2), each column's
          // chunks in K order. A micro-panel in L1 with B streamed from L2 instead
          // (nc = 1024) measured 0.72-0.97x of this.
          for (int64_t jp = cp0; jp < cp1; ++jp) {
            for (int64_t g = 0; g < chunks; ++g) {
              for (int64_t ip = ic; ip < ic_end; ++ip) tile(ip, jp, g);
            }
          }
        }
        // The next group's B pack overwrites this one.
        if (!private_b) {
#pragma omp barrier
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mxtrain::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace mxtrain::internal {

HWY_EXPORT(RunGemm);

void GemmSimd(const GemmProblem& p, std::vector<uint8_t>& skipped) {
  DCheckGemmProblem(p, skipped);
  EnsureSimdTargetChosen();
  HWY_DYNAMIC_DISPATCH(RunGemm)(p, skipped);
}

}  // namespace mxtrain::internal
#endif
