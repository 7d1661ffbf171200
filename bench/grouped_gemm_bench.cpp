// SPDX-License-Identifier: Apache-2.0
// Grouped GEMM (the experts of a MoE layer, CpuBackend::grouped_gemm) against one GEMM of the
// same total size, f32 on tessel's CPU backend: the expert up-projection over R routed rows
// (R x C times E weights [F, C], each group against its own) versus R x C times one [F, C]
// weight, and the weight-gradient form (E products dy_g^T x_g) versus one dy^T x over all R rows.
// Groups are even (R / E rows each) or skewed (a Zipf-like load: expert e gets a share
// proportional to 1 / (e + 1)), at 8 experts (Mixtral) and 64 (DeepSpeed-MoE's largest layers).
// The ratio of the GFLOP/s counters is the grouped GEMM's efficiency.
#include <benchmark/benchmark.h>

#include <numeric>
#include <string>
#include <vector>

#include "tessel/kernels/backend.h"
#include "tessel/tensor/tensor.h"

namespace {

using tessel::DType;
using tessel::Tensor;

constexpr int64_t kRows = 1024, kHidden = 512, kFfn = 1024;

std::vector<int64_t> group_rows(int64_t experts, bool skewed) {
  std::vector<int64_t> rows(size_t(experts), kRows / experts);
  if (skewed) {
    double total = 0;
    for (int64_t e = 0; e < experts; ++e) total += 1.0 / double(e + 1);
    int64_t used = 0;
    for (int64_t e = 0; e < experts; ++e) {
      rows[size_t(e)] = int64_t(double(kRows) / (double(e + 1) * total));
      used += rows[size_t(e)];
    }
    rows[0] += kRows - used;
  }
  return rows;
}

Tensor offsets_of(const std::vector<int64_t>& rows) {
  std::vector<int64_t> off(rows.size() + 1, 0);
  std::partial_sum(rows.begin(), rows.end(), off.begin() + 1);
  return tessel::from_data(off, {int64_t(off.size())});
}

void set_rate(benchmark::State& state) {
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(kRows) * kHidden * kFfn,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Forward: [R, C] rows of each group times its [F, C] weight transposed -> [R, F].
void bm_grouped(benchmark::State& state, int64_t experts, bool skewed) {
  Tensor x = tessel::randn({kRows, kHidden}), w = tessel::randn({experts, kFfn, kHidden});
  Tensor y = tessel::empty({kRows, kFfn}), off = offsets_of(group_rows(experts, skewed));
  auto& be = tessel::kernels::cpu_backend();
  for (auto _ : state) be.grouped_gemm({true, false}, x, w, off, y);
  set_rate(state);
}

void bm_one_gemm(benchmark::State& state) {
  Tensor x = tessel::randn({kRows, kHidden}), w = tessel::randn({kFfn, kHidden});
  Tensor y = tessel::empty({kRows, kFfn});
  auto d = tessel::kernels::dense_gemm_desc(1, kRows, kFfn, kHidden, false, true);
  auto& be = tessel::kernels::cpu_backend();
  for (auto _ : state) be.gemm(d, x, w, y);
  set_rate(state);
}

// Weight gradient: dw[g] = dy_g^T x_g, [F, C] per group, against one dy^T x.
void bm_grouped_weight(benchmark::State& state, int64_t experts, bool skewed) {
  Tensor dy = tessel::randn({kRows, kFfn}), x = tessel::randn({kRows, kHidden});
  Tensor dw = tessel::empty({experts, kFfn, kHidden}),
         off = offsets_of(group_rows(experts, skewed));
  auto& be = tessel::kernels::cpu_backend();
  for (auto _ : state) be.grouped_gemm({false, true}, dy, x, off, dw);
  set_rate(state);
}

void bm_one_gemm_weight(benchmark::State& state) {
  Tensor dy = tessel::randn({kRows, kFfn}), x = tessel::randn({kRows, kHidden});
  Tensor dw = tessel::empty({kFfn, kHidden});
  auto d = tessel::kernels::dense_gemm_desc(1, kFfn, kHidden, kRows, true, false);
  auto& be = tessel::kernels::cpu_backend();
  for (auto _ : state) be.gemm(d, dy, x, dw);
  set_rate(state);
}

}  // namespace

BENCHMARK(bm_one_gemm)->Name("forward/one_gemm")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_grouped, e8_even, 8, false)
    ->Name("forward/grouped_e8_even")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bm_grouped, e8_skewed, 8, true)
    ->Name("forward/grouped_e8_skewed")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bm_grouped, e64_even, 64, false)
    ->Name("forward/grouped_e64_even")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(bm_one_gemm_weight)
    ->Name("weight_grad/one_gemm")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bm_grouped_weight, e8_even, 8, false)
    ->Name("weight_grad/grouped_e8_even")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bm_grouped_weight, e8_skewed, 8, true)
    ->Name("weight_grad/grouped_e8_skewed")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bm_grouped_weight, e64_even, 64, false)
    ->Name("weight_grad/grouped_e64_even")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
