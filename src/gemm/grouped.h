// Internal: the per-group drivers that MxGroupedGemm / MxGroupedWgrad (grouped_gemm.cc)
// and their high-precision twins (hp_gemm.cc) share: outputs, per-group views, bias rows,
// and what an empty group gets. Each group's result comes from one dense GEMM call, so it
// is bit-identical to that call on the group alone.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "fp_env.h"
#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/group_list.h"
#include "omp_threads.h"

namespace mxtrain::internal {

// Whether a per-group call's result is independent of its thread count (the MX GEMM), so
// that groups may run concurrently with one thread each, or not (oneDNN picks its blocking,
// and with it the summation order, by thread count): then each call gets all threads.
enum class GroupThreads { kAnyCount, kAllThreads };

// How ForEachGroup runs (PlanGroups): the groups with rows, largest first, and the thread
// that owns each group in a concurrent run (-1 for empty ones).
struct GroupSchedule {
  bool concurrent = false;
  std::vector<int> order;
  std::vector<int> owner;
};

// For two threads: the groups of `order` (rows > 0) that thread 0 takes so that the larger
// share of rows is as small as it can be, found by subset sums over rows counted in units
// of ceil(total / kUnits) (exact up to that rounding; for each sum the group that first
// reached it is kept, to read the subset back). Largest first alone left the uneven MoE
// bench layer 2% off even (4180 against 4012 of 8192 rows; best 4098), and the thread with
// the extra expert finished 1-3 ms after the other.
inline std::vector<int> HalfOfGroups(const GroupList& groups, const std::vector<int>& order) {
  constexpr int64_t kUnits = 4096;
  int64_t total = 0;
  for (int e : order) total += groups.size(e);
  const int64_t unit = std::max<int64_t>(1, (total + kUnits - 1) / kUnits);
  std::vector<int64_t> w(order.size());
  int64_t sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += w[i] = (groups.size(order[i]) + unit - 1) / unit;
  // first[s]: the index into `order` of the group that first made sum s reachable, -1 if
  // none has; s = 0 is reachable with no group.
  std::vector<int> first(static_cast<size_t>(sum + 1), -1);
  const auto reachable = [&](int64_t s) { return s == 0 || first[s] >= 0; };
  for (size_t i = 0; i < order.size(); ++i) {
    for (int64_t s = sum - w[i]; s >= 0; --s) {
      if (reachable(s) && !reachable(s + w[i])) first[s + w[i]] = static_cast<int>(i);
    }
  }
  int64_t best = sum / 2;  // the largest reachable sum not above half
  while (!reachable(best)) --best;
  std::vector<int> half;
  for (int64_t s = best; s > 0; s -= w[first[s]]) half.push_back(order[first[s]]);
  return half;
}

inline GroupSchedule PlanGroups(const GroupList& groups, int threads, GroupThreads mode) {
  GroupSchedule plan;
  for (int e = 0; e < groups.num_groups(); ++e) {
    if (groups.size(e) > 0) plan.order.push_back(e);
  }
  std::stable_sort(plan.order.begin(), plan.order.end(),
                   [&](int x, int y) { return groups.size(x) > groups.size(y); });
  std::vector<int64_t> load(static_cast<size_t>(std::max(threads, 1)), 0);
  plan.owner.assign(static_cast<size_t>(groups.num_groups()), -1);
  if (threads == 2) {
    for (int e : plan.order) plan.owner[e] = 1;
    for (int e : HalfOfGroups(groups, plan.order)) plan.owner[e] = 0;
    for (int e : plan.order) load[plan.owner[e]] += groups.size(e);
  } else {
    // Largest first, each to the thread with the least rows so far.
    for (int e : plan.order) {
      const auto least = std::min_element(load.begin(), load.end());
      *least += groups.size(e);
      plan.owner[e] = static_cast<int>(least - load.begin());
    }
  }
  const int64_t makespan = *std::max_element(load.begin(), load.end());
  plan.concurrent =
      mode == GroupThreads::kAnyCount && threads > 1 &&
      static_cast<double>(makespan) * threads <= 1.05 * static_cast<double>(groups.total_rows());
  return plan;
}

// Runs fn(e, threads_per_call) once for every group e with rows. Groups run concurrently,
// one thread each (on two threads the split of HalfOfGroups; on more, largest first, each
// to the thread with the least work so far), when that balances their rows to within 5% of
// an even split over `threads`; otherwise one after another with all threads. Each
// group's result is the same either way (a GEMM's bytes never depend on its thread count);
// one thread per group saves the barriers and the uneven split of a small group's row
// panels, and each thread's L2 holds only its own expert's weights. The first exception
// thrown by any call is rethrown.
template <typename Fn>
void ForEachGroup(const GroupList& groups, int threads, GroupThreads mode, Fn&& fn) {
  const GroupSchedule plan = PlanGroups(groups, threads, mode);
  if (!plan.concurrent) {
    for (int e : plan.order) fn(e, threads);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(threads)
  {
    const internal::ScopedFpEnv fp_env;
    // The team can be smaller than asked for (a nested region, OMP_THREAD_LIMIT): owners
    // beyond it fold onto the threads there are, so every group still runs once.
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    for (int e : plan.order) {
      if (plan.owner[e] % team != t) continue;
      try {
        fn(e, 1);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// fprop / dgrad of x_rows tokens against `experts` weight matrices: y [x_rows, out_cols]
// of options.out_dtype; for each group e with rows, gemm(e, o) with o = options writing
// rows of e in place (o.out) and o.bias row e of an [E, out_cols] bias, run by
// ForEachGroup. `op` prefixes the messages.
template <typename Gemm>
Tensor GroupedRowsGemm(const GroupList& groups, int64_t experts, int64_t x_rows, int64_t out_cols,
                       const GemmOptions& options, const char* op, GroupThreads mode, Gemm&& gemm) {
  MXTRAIN_CHECK(groups.num_groups() == experts, op, ": ", groups.num_groups(), " groups for ",
                experts, " experts");
  MXTRAIN_CHECK(groups.total_rows() == x_rows, op, ": group list covers ", groups.total_rows(),
                " rows but x has M = ", x_rows);
  MXTRAIN_CHECK(options.accumulate == nullptr && options.out == nullptr, op,
                ": no accumulator or output tensor (accumulation is for wgrad)");
  if (options.bias != nullptr) {
    MXTRAIN_CHECK(
        options.bias->dtype() == DType::kF32 && options.bias->shape() == (Shape{experts, out_cols}),
        op, ": bias must be f32 [", experts, ", ", out_cols, "]");
  }
  Tensor y = Tensor::Empty(options.out_dtype, {groups.total_rows(), out_cols}, options.category);
  const int threads = TeamSize(options.threads, op);
  ForEachGroup(groups, threads, mode, [&](int e, int group_threads) {
    GemmOptions o = options;
    o.threads = group_threads;
    Tensor bias_e;
    if (options.bias != nullptr) {
      bias_e = options.bias->Slice(e, e + 1).Reshape({out_cols});
      o.bias = &bias_e;
    }
    Tensor y_e = y.Slice(groups.begin(e), groups.end(e));  // written in place
    o.out = &y_e;
    gemm(e, o);
  });
  return y;
}

// K-grouped wgrad: dW [E, shape[1], shape[2]] f32, new or options.accumulate; for each
// group e with rows, gemm(e, o) with o writing (or accumulating into) dW[e]. An empty
// group gets dW[e] = 0, or leaves the accumulator untouched.
template <typename Gemm>
Tensor GroupedWgradGemm(const GroupList& groups, const Shape& shape, const GemmOptions& options,
                        const char* op, GroupThreads mode, Gemm&& gemm) {
  MXTRAIN_CHECK(
      options.out_dtype == DType::kF32 && options.bias == nullptr && options.out == nullptr, op,
      ": the output is a new f32 tensor (or the accumulator), no bias");
  Tensor out;
  if (options.accumulate != nullptr) {
    MXTRAIN_CHECK(
        options.accumulate->dtype() == DType::kF32 && options.accumulate->shape() == shape, op,
        ": accumulator must be f32 ", shape.ToString());
    out = *options.accumulate;
  } else {
    out = Tensor::Empty(DType::kF32, shape, options.category);
  }
  for (int e = 0; e < groups.num_groups(); ++e) {
    if (groups.size(e) == 0 && options.accumulate == nullptr) {
      Tensor dw_e = out.Slice(e, e + 1).Reshape({shape[1], shape[2]});
      std::memset(dw_e.raw(), 0, dw_e.NumBytes());
    }
  }
  const int threads = TeamSize(options.threads, op);
  ForEachGroup(groups, threads, mode, [&](int e, int group_threads) {
    Tensor dw_e = out.Slice(e, e + 1).Reshape({shape[1], shape[2]});
    GemmOptions o = options;
    o.threads = group_threads;
    if (options.accumulate != nullptr) {
      o.accumulate = &dw_e;
    } else {
      o.out = &dw_e;  // written in place
    }
    gemm(e, o);
  });
  return out;
}

}  // namespace mxtrain::internal
