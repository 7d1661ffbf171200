// SPDX-License-Identifier: Apache-2.0
// CPU reduction over any set of dims. x's dims are coalesced into alternating kept / reduced
// groups, so every case is a copy, a blocked full reduction, row reductions ([rows, C] over C)
// or whole-row accumulation ([rows, C] over rows: bias gradients). Sums accumulate in double,
// also for f32, in an order that does not depend on the thread count.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"
#include "tessel/kernels/cpu/loops.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

struct Group {
  int64_t size = 1;
  bool reduced = false;
  int64_t out_stride = 0;  // kept groups: the output stride of the group
};

std::vector<Group> coalesce(const Shape& shape, const std::vector<int>& dims) {
  std::vector<bool> reduced(size_t(shape.ndim()), false);
  for (int d : dims) reduced[size_t(d)] = true;
  std::vector<Group> groups;
  for (int d = 0; d < shape.ndim(); ++d) {
    if (shape[d] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[size_t(d)])
      groups.back().size *= shape[d];
    else
      groups.push_back({shape[d], reduced[size_t(d)], 0});
  }
  int64_t stride = 1;
  for (size_t g = groups.size(); g-- > 0;) {
    if (groups[g].reduced) continue;
    groups[g].out_stride = stride;
    stride *= groups[g].size;
  }
  return groups;
}

// Folding one value into an accumulator; Max / Min propagate NaN and are written as selects.
template <ReduceOp kOp>
inline double fold(double acc, double v) {
  if constexpr (kOp == ReduceOp::Max) return (acc > v || acc != acc) ? acc : v;
  if constexpr (kOp == ReduceOp::Min) return (acc < v || acc != acc) ? acc : v;
  return acc + v;
}

template <ReduceOp kOp>
constexpr double identity() {
  if constexpr (kOp == ReduceOp::Max) return -std::numeric_limits<double>::infinity();
  if constexpr (kOp == ReduceOp::Min) return std::numeric_limits<double>::infinity();
  return 0.0;
}

// Reduces x[0, n) to one value.
template <ReduceOp kOp, typename T>
double reduce_row(const T* x, int64_t n) {
  if constexpr (kOp == ReduceOp::Sum || kOp == ReduceOp::Mean) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += double(x[i]);
    return s;
  } else {
    // Lanes keep their own extreme; a NaN anywhere is tracked separately because the lane
    // combination of `omp simd reduction(max)` need not propagate it.
    T m = T(identity<kOp>());
    int nan = 0;
    if constexpr (kOp == ReduceOp::Max) {
#pragma omp simd reduction(max : m) reduction(| : nan)
      for (int64_t i = 0; i < n; ++i) {
        m = x[i] > m ? x[i] : m;
        nan |= x[i] != x[i];
      }
    } else {
#pragma omp simd reduction(min : m) reduction(| : nan)
      for (int64_t i = 0; i < n; ++i) {
        m = x[i] < m ? x[i] : m;
        nan |= x[i] != x[i];
      }
    }
    return nan ? std::numeric_limits<double>::quiet_NaN() : double(m);
  }
}

template <ReduceOp kOp, typename T>
void full_reduce(const T* x, int64_t n, double* result) {
  // Fixed-size blocks so the summation order (and the result) is the same for any thread count.
  constexpr int64_t kBlock = 1 << 16;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b)
      partial[size_t(b)] = reduce_row<kOp>(x + b * kBlock, std::min(kBlock, n - b * kBlock));
  });
  double acc = identity<kOp>();
  for (double p : partial) acc = fold<kOp>(acc, p);
  *result = acc;
}

// Outer groups (all but the last) over a contiguous inner group, into acc (one per output).
template <ReduceOp kOp, typename T>
void grouped_reduce(const T* x, const std::vector<Group>& g, double* acc) {
  const int m = int(g.size());
  const int64_t inner = g.back().size;
  const bool inner_reduced = g.back().reduced;
  // Visits outer indices with the first group's index in [first_lo, first_hi), and within each
  // inner row the columns [c_lo, c_hi).
  auto visit = [&](int64_t first_lo, int64_t first_hi, int64_t c_lo, int64_t c_hi) {
    std::vector<int64_t> idx(size_t(m - 1), 0);
    idx[0] = first_lo;
    while (idx[0] < first_hi) {
      int64_t flat = 0, out_off = 0;
      for (int k = 0; k < m - 1; ++k) {
        flat = flat * g[size_t(k)].size + idx[size_t(k)];
        if (!g[size_t(k)].reduced) out_off += idx[size_t(k)] * g[size_t(k)].out_stride;
      }
      const T* row = x + flat * inner;
      if (inner_reduced) {
        acc[out_off] = fold<kOp>(acc[out_off], reduce_row<kOp>(row, inner));
      } else {
        double* a = acc + out_off;
#pragma omp simd
        for (int64_t j = c_lo; j < c_hi; ++j) a[j] = fold<kOp>(a[j], double(row[j]));
      }
      for (int k = m - 2; k >= 0; --k) {
        if (++idx[size_t(k)] < g[size_t(k)].size || k == 0) break;
        idx[size_t(k)] = 0;
      }
    }
  };
  int64_t total = 1;
  for (const Group& gr : g) total *= gr.size;
  if (!g[0].reduced) {
    // Distinct first-group indices write distinct outputs.
    int64_t per_index = total / g[0].size;
    parallel_for(0, g[0].size, std::max<int64_t>(1, cpu::kElementGrain / per_index),
                 [&](int64_t lo, int64_t hi) { visit(lo, hi, 0, inner); });
  } else if (!inner_reduced) {
    // Distinct column ranges write distinct outputs.
    int64_t per_column = total / inner;
    parallel_for(0, inner, std::max<int64_t>(16, cpu::kElementGrain / per_column),
                 [&](int64_t lo, int64_t hi) { visit(0, g[0].size, lo, hi); });
  } else {
    visit(0, g[0].size, 0, inner);
  }
}

template <ReduceOp kOp, typename T>
void reduce_impl(const T* x, const std::vector<Group>& groups, int64_t x_numel, T* out,
                 int64_t out_numel, int64_t count) {
  std::vector<double> acc(size_t(out_numel), identity<kOp>());
  if (x_numel > 0) {
    if (groups.size() == 1 && groups[0].reduced)
      full_reduce<kOp>(x, x_numel, acc.data());
    else
      grouped_reduce<kOp>(x, groups, acc.data());
  }
  parallel_for(0, out_numel, cpu::kElementGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out[i] = T(kOp == ReduceOp::Mean ? acc[size_t(i)] / double(count) : acc[size_t(i)]);
  });
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, std::span<const int> dims, Tensor& out) {
  std::vector<int> reduced = validate_reduce(*this, op, x, dims, out);
  if (cpu::is_half(x.dtype())) return cpu::half_reduce(*this, op, x, dims, out);
  int64_t count = 1;
  for (int d : reduced) count *= x.size(d);
  std::vector<Group> groups = coalesce(x.shape(), reduced);
  bool any_reduced = false;
  for (const Group& g : groups) any_reduced |= g.reduced;
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op_out = out.data<T>();
    if (!any_reduced) {  // every reduced dim has size 1: a copy
      if (x.numel() > 0) std::memcpy(op_out, xp, x.nbytes());
      return;
    }
    switch (op) {
      case ReduceOp::Sum:
        return reduce_impl<ReduceOp::Sum>(xp, groups, x.numel(), op_out, out.numel(), count);
      case ReduceOp::Mean:
        return reduce_impl<ReduceOp::Mean>(xp, groups, x.numel(), op_out, out.numel(), count);
      case ReduceOp::Max:
        return reduce_impl<ReduceOp::Max>(xp, groups, x.numel(), op_out, out.numel(), count);
      case ReduceOp::Min:
        return reduce_impl<ReduceOp::Min>(xp, groups, x.numel(), op_out, out.numel(), count);
    }
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
