// SPDX-License-Identifier: Apache-2.0
// Decode attention at GPT-2 124M's shape (12 heads of 64) against a KV cache of 128, 512 and 1024
// keys, batch 1 and 16: the paged kernel (Backend::paged_attention, blocks of 16 in a shuffled
// order) against the fused attention kernel on a contiguous cache (Backend::attention with one
// query per sequence, what ops::attention runs). Both read every key and value once per step, so
// the counters give the time per generated token and the bytes of K and V streamed per second.
// Rates use CPU time (the machine is shared; measure with one thread, docs/BENCHMARKS.md):
//   TESSEL_NUM_THREADS=1 OMP_NUM_THREADS=1 build/bench/paged_attention_bench
// PAGED_BENCH_COLD=1 flushes K and V from the caches before every call (outside the timing), as
// a serving step's layer products do between two attention calls.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tessel/kernels/backend.h"
#include "tessel/tensor/tensor.h"

namespace {

using tessel::DType;
using tessel::Tensor;
namespace k = tessel::kernels;

constexpr int64_t kHeads = 12, kDim = 64, kBlock = 16;

bool cold() {
  static const bool on = [] {
    const char* e = std::getenv("PAGED_BENCH_COLD");
    return e != nullptr && std::string(e) == "1";
  }();
  return on;
}

// Evicts t's bytes from every cache level (the next read comes from memory).
void flush(const Tensor& t) {
  const char* p = static_cast<const char*>(t.data_ptr());
  const size_t n = size_t(t.numel()) * tessel::dtype_size(t.dtype());
  for (size_t at = 0; at < n; at += 64) _mm_clflush(p + at);
  _mm_mfence();
}

// Runs f once per iteration, the pools flushed first (untimed) in the cold mode.
template <typename F>
void timed_loop(benchmark::State& state, const Tensor& k, const Tensor& v, F f) {
  for (auto _ : state) {
    if (cold()) {
      state.PauseTiming();
      flush(k);
      flush(v);
      state.ResumeTiming();
    }
    f();
  }
}

void set_counters(benchmark::State& state, int64_t batch, int64_t ctx, DType dt) {
  const double bytes = 2.0 * double(batch * ctx * kHeads * kDim) * double(tessel::dtype_size(dt));
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["s/token"] = benchmark::Counter(
      double(batch), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void bm_paged(benchmark::State& state, DType dt) {
  const int64_t batch = state.range(0), ctx = state.range(1);
  const int64_t per_seq = (ctx + kBlock - 1) / kBlock, blocks = batch * per_seq;
  Tensor q = tessel::randn({batch, kHeads, kDim}).to(dt);
  Tensor kp = tessel::randn({blocks, kBlock, kHeads, kDim}).to(dt);
  Tensor vp = tessel::randn({blocks, kBlock, kHeads, kDim}).to(dt);
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(1));
  Tensor tables = tessel::from_data(ids, {batch, per_seq});
  Tensor lens = tessel::full({batch}, double(ctx), DType::I64);
  Tensor starts = tessel::arange(0, double(batch + 1), 1, DType::I64);
  Tensor out = tessel::empty({batch, kHeads, kDim}, dt);
  const k::PagedAttentionDesc desc;
  timed_loop(state, kp, vp,
             [&] { k::cpu_backend().paged_attention(desc, q, kp, vp, tables, lens, starts, out); });
  set_counters(state, batch, ctx, dt);
}

void bm_contiguous(benchmark::State& state, DType dt) {
  const int64_t batch = state.range(0), ctx = state.range(1);
  k::AttentionDesc desc{batch, 1, ctx, kHeads, kHeads, kDim, true, 1.0 / std::sqrt(double(kDim)),
                        0};
  Tensor q = tessel::randn({batch, 1, kHeads, kDim}).to(dt);
  Tensor kk = tessel::randn({batch, ctx, kHeads, kDim}).to(dt);
  Tensor v = tessel::randn({batch, ctx, kHeads, kDim}).to(dt);
  Tensor out = tessel::empty({batch, 1, kHeads, kDim}, dt);
  Tensor lse = tessel::empty({batch, kHeads, 1}, k::stat_dtype(dt));
  timed_loop(state, kk, v, [&] { k::cpu_backend().attention(desc, q, kk, v, Tensor(), out, lse); });
  set_counters(state, batch, ctx, dt);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t batch : {1, 16})
    for (int64_t ctx : {128, 512, 1024}) b->Args({batch, ctx});
  b->ArgNames({"batch", "ctx"})->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(bm_paged, f32, DType::F32)->Apply(shapes);
BENCHMARK_CAPTURE(bm_contiguous, f32, DType::F32)->Apply(shapes);
BENCHMARK_CAPTURE(bm_paged, bf16, DType::BF16)->Apply(shapes);
BENCHMARK_CAPTURE(bm_contiguous, bf16, DType::BF16)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
