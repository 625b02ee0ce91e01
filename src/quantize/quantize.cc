// The quantization drivers: validate, allocate the outputs, split the work over OpenMP
// threads and hand each piece to the current target's kernels (kernels.h).
#include "mxtrain/quantize.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "fp_env.h"
#include "mxtrain/error.h"
#include "mxtrain/testing.h"
#include "omp_threads.h"
#include "quantize/kernels.h"
#include "quantize/scale_table.h"
#include "simd_internal.h"

namespace mxtrain {
namespace {

using internal::ColStrip;
using internal::ColwiseOut;
using internal::QuantKernels;
using internal::QuantSource;
using internal::RowwiseOut;

// Columns per work item when a strip is split across threads: a multiple of the block (the
// dual kernel quantizes whole row blocks) and of every vector width.
constexpr int64_t kColumnChunkQuantum = 64;
// The most input bytes of one columnwise strip: a quarter of an L2 of 1 MiB or more, so
// that a strip and the next one it prefetches take half of it. On Zen 4 (1 MiB L2) fp32
// 4096 x 4096 had 512 KiB strips, and cutting them in two column pieces took colwise, 2
// threads, from 2.82-3.04 to 2.33-2.71 ms; an eighth of L2 was worse. Sapphire Rapids' 2
// MiB L2 keeps those strips whole. A smaller L2 is taken whole: on Zen 3 (512 KiB) a
// quarter cut fp32 rows into 4 KiB pieces, and 4096 x 4096 took 5.2-6.1 ms (0.77-0.85 of
// the baseline) against 4.1-4.6 (0.98-1.04) in 512 KiB strips; bf16 the same either way
// (docs/decisions.md "Columnwise strips"). The dual kernel keeps whole rows: cut, it lost
// (3.84 -> 4.61 ms; one thread 7.2 -> 10.7).
int64_t MaxStripBytes() {
  const int64_t l2 = internal::L2CacheBytes();
  return l2 >= (int64_t{1} << 20) ? l2 / 4 : l2;
}

QuantSource SourceOf(const Tensor& x, const QuantizeOptions& options, const char* op) {
  MXTRAIN_CHECK(x.defined(), op, ": input tensor is undefined");
  MXTRAIN_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, op,
                ": input must be f32 or bf16, got ", Name(x.dtype()));
  MXTRAIN_CHECK(x.rank() >= 2, op, ": input must have rank >= 2, got shape ", x.shape().ToString());
  const int64_t cols = x.shape()[-1];
  int64_t flat_rows = 1;
  for (int i = 0; i + 1 < x.rank(); ++i) flat_rows *= x.shape()[i];
  return QuantSource{x.raw(),
                     x.dtype() == DType::kBF16,
                     flat_rows,
                     cols,
                     options.format,
                     options.rule,
                     &internal::ScaleTableFor(options.rule, options.format)};
}

int ThreadCount(const QuantizeOptions& options) {
  return internal::TeamSize(options.threads, "quantize");
}

// Columnwise blocks of a [rows, cols] source split into segments (groups, or the leading
// batch index of [..., M, K]): one strip per 32 rows of a segment, then split by columns
// when there are fewer strips than threads, into as many pieces as give each thread one
// (only then: a piece narrower than the rows costs the dual kernel its batches across rows
// and every kernel its per-strip work again; docs/decisions.md, "Threads"). With
// max_strip_bytes > 0, strips of more input bytes than that are first cut into column
// pieces, each piece's strips in row order (the order NextStripPrefetch assumes), so that a
// strip and the next one it prefetches fit in L2 together.
std::vector<ColStrip> MakeStrips(const GroupList& segments, int64_t cols, int64_t elem_bytes,
                                 int threads, int64_t max_strip_bytes) {
  // Column pieces: one of all the columns, or as few as keep each within max_strip_bytes.
  // (pieces0 - 1) * width0 < cols, as width0 <= max_width, so none of them is empty.
  int64_t pieces0 = 1, width0 = cols;
  if (max_strip_bytes > 0) {
    const int64_t max_width =
        std::max(kColumnChunkQuantum, max_strip_bytes / (kMxBlock * elem_bytes) /
                                          kColumnChunkQuantum * kColumnChunkQuantum);
    if (cols > max_width) {
      pieces0 = CeilDiv(cols, max_width);
      width0 = CeilDiv(CeilDiv(cols, pieces0), kColumnChunkQuantum) * kColumnChunkQuantum;
    }
  }
  std::vector<ColStrip> strips;
  for (int64_t p = 0; p < pieces0; ++p) {
    const int64_t c0 = p * width0;
    const int64_t c1 = std::min(cols, c0 + width0);
    for (int g = 0; g < segments.num_groups(); ++g) {
      int64_t scale_row = segments.ScaleRowBegin(g);
      for (int64_t r = segments.begin(g); r < segments.end(g); r += kMxBlock) {
        strips.push_back({r, std::min(kMxBlock, segments.end(g) - r), scale_row++, c0, c1});
      }
    }
  }
  if (pieces0 > 1) return strips;
  const int64_t wanted = threads;
  const int64_t have = static_cast<int64_t>(strips.size());
  if (have == 0 || have >= wanted || cols <= kColumnChunkQuantum) return strips;
  const int64_t pieces = std::min(CeilDiv(wanted, have), CeilDiv(cols, kColumnChunkQuantum));
  const int64_t chunk = CeilDiv(CeilDiv(cols, pieces), kColumnChunkQuantum) * kColumnChunkQuantum;
  std::vector<ColStrip> split;
  for (const ColStrip& s : strips) {
    for (int64_t c = 0; c < cols; c += chunk) {
      split.push_back({s.row0, s.num_rows, s.scale_row, c, std::min(cols, c + chunk)});
    }
  }
  return split;
}

// Segments for a plain columnwise quantization of [..., M, K]: one per leading index.
GroupList BatchSegments(const Shape& shape) {
  int64_t batch = 1;
  for (int i = 0; i + 2 < shape.rank(); ++i) batch *= shape[i];
  if (batch == 0) return GroupList::Uniform(1, 0);
  return GroupList::Uniform(batch, shape[-2]);
}

template <typename Fn>
void ForEachStrip(const std::vector<ColStrip>& strips, int64_t bytes_per_column, int threads,
                  Fn&& fn) {
  const int64_t n = static_cast<int64_t>(strips.size());
  if (n == 0) return;
  int64_t width = 0;
  for (const ColStrip& s : strips) width = std::max(width, s.col1 - s.col0);
  const int used = static_cast<int>(std::min<int64_t>(threads, n));
  // Per thread: one strip's per-column workspace (kernels.h).
  const int64_t slot_bytes = bytes_per_column * std::max<int64_t>(width, 1);
  Tensor workspace = Tensor::Empty(DType::kU8, {used, slot_bytes}, MemoryCategory::kWorkspace);
#pragma omp parallel num_threads(used)
  {
    const internal::ScopedFpEnv fp_env;
    const internal::Workspace ws{
        workspace.mutable_data<uint8_t>() + omp_get_thread_num() * slot_bytes, slot_bytes};
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) fn(strips[i], ws);
  }
}

// Uninitialized data and scales of one MX layout of x, counted under options.category.
struct MxBuffers {
  Tensor data;
  Tensor scales;

  MxBuffers(const Tensor& x, BlockAxis axis, const std::optional<GroupList>& groups,
            const QuantizeOptions& options)
      : data(Tensor::Empty(DType::kU8, x.shape(), options.category)),
        scales(Tensor::Empty(DType::kU8, MxTensor::ScaleShape(x.shape(), axis, groups),
                             options.category)) {}

  MxTensor Finish(BlockAxis axis, const QuantizeOptions& options,
                  std::optional<GroupList> groups = std::nullopt) && {
    return MxTensor(std::move(data), std::move(scales), options.format, options.rule, axis,
                    std::move(groups));
  }
};

MxTensor MakeColumnwise(const Tensor& x, const QuantizeOptions& options, const GroupList& segments,
                        std::optional<GroupList> groups) {
  const QuantSource src = SourceOf(x, options, "columnwise quantize");
  MxBuffers col(x, BlockAxis::kColumnwise, groups, options);
  const QuantKernels& k = internal::CurrentQuantKernels();
  const int threads = ThreadCount(options);
  const ColwiseOut out{col.data.mutable_data<uint8_t>(), col.scales.mutable_data<uint8_t>(),
                       StreamsColumnwiseCodes(x, options)};
  ForEachStrip(MakeStrips(segments, src.cols, src.bf16 ? 2 : 4, threads, MaxStripBytes()),
               internal::WorkspaceBytesPerColumn(/*dual=*/false, src.bf16), threads,
               [&](const ColStrip& s, internal::Workspace ws) { k.colwise(src, s, out, ws); });
  return std::move(col).Finish(BlockAxis::kColumnwise, options, std::move(groups));
}

// Rowwise and columnwise (blocked per segment; token-grouped when groups are given) from
// one pass of the dual kernel over x.
DualMx MakeDual(const Tensor& x, const QuantizeOptions& options, const GroupList& segments,
                std::optional<GroupList> groups) {
  const QuantSource src = SourceOf(x, options, "dual quantize");
  MxBuffers row(x, BlockAxis::kRowwise, std::nullopt, options);
  MxBuffers col(x, BlockAxis::kColumnwise, groups, options);
  const QuantKernels& k = internal::CurrentQuantKernels();
  const int threads = ThreadCount(options);
  const RowwiseOut row_out{row.data.mutable_data<uint8_t>(), row.scales.mutable_data<uint8_t>()};
  const ColwiseOut col_out{col.data.mutable_data<uint8_t>(), col.scales.mutable_data<uint8_t>(),
                           StreamsColumnwiseCodes(x, options)};
  ForEachStrip(
      MakeStrips(segments, src.cols, src.bf16 ? 2 : 4, threads, /*max_strip_bytes=*/0),
      internal::WorkspaceBytesPerColumn(/*dual=*/true, src.bf16), threads,
      [&](const ColStrip& s, internal::Workspace ws) { k.dual(src, s, row_out, col_out, ws); });
  return DualMx{std::move(row).Finish(BlockAxis::kRowwise, options),
                std::move(col).Finish(BlockAxis::kColumnwise, options, std::move(groups))};
}

void CheckGroupedInput(const Tensor& x, const GroupList& groups, const char* op) {
  MXTRAIN_CHECK(x.rank() == 2, op, ": input must be 2-D [M, K], got shape ", x.shape().ToString());
  MXTRAIN_CHECK(groups.num_groups() > 0 && groups.total_rows() == x.shape()[0], op,
                ": group list covers ", groups.total_rows(), " rows but M = ", x.shape()[0]);
}

}  // namespace

std::string_view Name(CodeStores stores) {
  switch (stores) {
    case CodeStores::kAuto:
      return "auto";
    case CodeStores::kCached:
      return "cached";
    case CodeStores::kStreaming:
      return "streaming";
  }
  return "?";
}

CodeStores ParseCodeStores(std::string_view name) {
  if (name == "auto") return CodeStores::kAuto;
  if (name == "cached") return CodeStores::kCached;
  if (name == "streaming") return CodeStores::kStreaming;
  Fail("unknown code stores '", name, "' (expected auto, cached or streaming)");
}

bool StreamsColumnwiseCodes(const Tensor& x, const QuantizeOptions& options) {
  switch (options.code_stores) {
    case CodeStores::kCached:
      return false;
    case CodeStores::kStreaming:
      return true;
    case CodeStores::kAuto:
      break;
  }
  const int64_t bytes = x.NumElements() * static_cast<int64_t>(DTypeSize(x.dtype()) + 1);
  return bytes >= kStreamCodesMinBytes;
}

bool StreamsDualRowwiseCodes(const Tensor& x, const QuantizeOptions& options) {
  return StreamsColumnwiseCodes(x, options) && x.rank() >= 1 && x.shape()[-1] % kMxBlock == 0 &&
         internal::CurrentQuantKernels().dual_streams_rows;
}

MxTensor QuantizeRowwise(const Tensor& x, const QuantizeOptions& options) {
  const internal::ScopedFpEnv fp_env;
  const QuantSource src = SourceOf(x, options, "rowwise quantize");
  MxBuffers row(x, BlockAxis::kRowwise, std::nullopt, options);
  const QuantKernels& k = internal::CurrentQuantKernels();
  const RowwiseOut out{row.data.mutable_data<uint8_t>(), row.scales.mutable_data<uint8_t>()};
  // At least 16 Ki elements per thread, so that tiny tensors don't pay for a thread team.
  const int64_t rows = src.rows;
  const int threads =
      static_cast<int>(std::clamp<int64_t>(rows * src.cols / (1 << 14), 1, ThreadCount(options)));
#pragma omp parallel num_threads(threads)
  {
    const internal::ScopedFpEnv fp_env;
    const internal::ThreadShare share(rows);
    if (share.begin < share.end) k.rowwise(src, share.begin, share.end, out);
  }
  return std::move(row).Finish(BlockAxis::kRowwise, options);
}

MxTensor QuantizeColumnwise(const Tensor& x, const QuantizeOptions& options) {
  const internal::ScopedFpEnv fp_env;
  SourceOf(x, options, "columnwise quantize");
  return MakeColumnwise(x, options, BatchSegments(x.shape()), std::nullopt);
}

MxTensor QuantizeGrouped(const Tensor& x, const GroupList& groups, const QuantizeOptions& options) {
  const internal::ScopedFpEnv fp_env;
  SourceOf(x, options, "grouped quantize");
  CheckGroupedInput(x, groups, "grouped quantize");
  return MakeColumnwise(x, options, groups, groups);
}

DualMx QuantizeDual(const Tensor& x, const QuantizeOptions& options) {
  const internal::ScopedFpEnv fp_env;
  SourceOf(x, options, "dual quantize");
  return MakeDual(x, options, BatchSegments(x.shape()), std::nullopt);
}

DualMx QuantizeDualGrouped(const Tensor& x, const GroupList& groups,
                           const QuantizeOptions& options) {
  const internal::ScopedFpEnv fp_env;
  SourceOf(x, options, "grouped dual quantize");
  CheckGroupedInput(x, groups, "grouped dual quantize");
  return MakeDual(x, options, groups, groups);
}

void EncodeElements(ElementFormat format, const float* in, uint8_t* out, size_t n) {
  internal::CurrentQuantKernels().encode(format, in, out, n);
}

}  // namespace mxtrain
