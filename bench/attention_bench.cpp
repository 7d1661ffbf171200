// SPDX-License-Identifier: Apache-2.0
// Attention throughput at GPT-2 small shapes (B=4, H=12, D=64): tessel's fused flash-style
// forward and backward, against an unfused baseline built from the same backend's GEMM (scores
// materialised per head, softmax, P V), which is what a framework without a fused kernel does.
// GFLOP/s count 4 B H D per visible (query, key) pair for the forward (2.5x that for the
// backward): Tq Tk pairs, about half when causal, about Tq window with a sliding window.
// Also Mistral-style grouped-query attention (B=1, T=1024, H=8, Hkv=2, D=64), causal, with a
// 256-key sliding window and without: forward, backward and the two together (attention_fwdbwd),
// and the two together at T=4096.
//   build/bench/attention_bench --benchmark_filter='gqa'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tessel/core/threads.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/tensor/tensor.h"

// The unfused baseline's softmax uses the fused kernel's vector exp, compiled here for the avx2
// kernel set (CMakeLists.txt defines the set), inside its instruction-set region.
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/attention_tiles.h"

namespace {

using tessel::DType;
using tessel::Tensor;
namespace k = tessel::kernels;

struct Problem {
  k::AttentionDesc desc;
  Tensor q, kk, v, out, lse, dout, dq, dk, dv;
  explicit Problem(int64_t b, int64_t t, int64_t h, int64_t d, bool causal, int64_t hkv = 0,
                   int64_t window = 0) {
    if (hkv == 0) hkv = h;
    desc = k::AttentionDesc{b, t, t, h, hkv, d, causal, 1.0 / std::sqrt(double(d)), window};
    q = tessel::randn({b, t, h, d});
    kk = tessel::randn({b, t, hkv, d});
    v = tessel::randn({b, t, hkv, d});
    dout = tessel::randn({b, t, h, d});
    out = tessel::zeros({b, t, h, d});
    dq = tessel::zeros({b, t, h, d});
    dk = tessel::zeros({b, t, hkv, d});
    dv = tessel::zeros({b, t, hkv, d});
    lse = tessel::zeros({b, h, t});
  }
  // GPT-2 figures keep the historical T^2/2 for causal; windows count the visible pairs.
  double forward_flops() const {
    const k::AttentionDesc& d = desc;
    double f = 4.0 * d.batch * d.heads * d.q_len * d.kv_len * d.head_dim;
    if (!d.causal) return f;
    if (d.window == 0) return f / 2;
    double pairs = 0;
    for (int64_t i = 0; i < d.q_len; ++i) pairs += double(std::min<int64_t>(i + 1, d.window));
    return 4.0 * d.batch * d.heads * pairs * d.head_dim;
  }
};

void set_rate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_forward(benchmark::State& state, int64_t t, bool causal) {
  Problem p(4, t, 12, 64, causal);
  for (auto _ : state) k::cpu_backend().attention(p.desc, p.q, p.kk, p.v, Tensor(), p.out, p.lse);
  set_rate(state, p.forward_flops());
}

void bm_backward(benchmark::State& state, int64_t t, bool causal) {
  Problem p(4, t, 12, 64, causal);
  k::cpu_backend().attention(p.desc, p.q, p.kk, p.v, Tensor(), p.out, p.lse);
  for (auto _ : state)
    k::cpu_backend().attention_backward(p.desc, p.q, p.kk, p.v, Tensor(), p.out, p.lse, p.dout,
                                        p.dq, p.dk, p.dv);
  set_rate(state, 2.5 * p.forward_flops());
}

// Mistral-style GQA: B=1, H=8, Hkv=2, D=64, causal, with the given window (0 = none).
Problem gqa_problem(int64_t t, int64_t window) {
  return Problem(1, t, 8, 64, true, 2, window);
}

void bm_gqa_forward(benchmark::State& state, int64_t t, int64_t window) {
  Problem p = gqa_problem(t, window);
  for (auto _ : state) k::cpu_backend().attention(p.desc, p.q, p.kk, p.v, Tensor(), p.out, p.lse);
  set_rate(state, p.forward_flops());
}

void bm_gqa_backward(benchmark::State& state, int64_t t, int64_t window) {
  Problem p = gqa_problem(t, window);
  k::cpu_backend().attention(p.desc, p.q, p.kk, p.v, Tensor(), p.out, p.lse);
  for (auto _ : state)
    k::cpu_backend().attention_backward(p.desc, p.q, p.kk, p.v, Tensor(), p.out, p.lse, p.dout,
                                        p.dq, p.dk, p.dv);
  set_rate(state, 2.5 * p.forward_flops());
}

// One training step's attention: the forward, then the backward from its saved lse.
void bm_gqa_fwdbwd(benchmark::State& state, int64_t t, int64_t window) {
  Problem p = gqa_problem(t, window);
  for (auto _ : state) {
    k::cpu_backend().attention(p.desc, p.q, p.kk, p.v, Tensor(), p.out, p.lse);
    k::cpu_backend().attention_backward(p.desc, p.q, p.kk, p.v, Tensor(), p.out, p.lse, p.dout,
                                        p.dq, p.dk, p.dv);
  }
  set_rate(state, 3.5 * p.forward_flops());
}

// In-place softmax of a row of t scores (t a multiple of the vector width) of which the first n
// are visible, with the same vector exp as the fused kernel so that the comparison is about
// fusion, not about exp.
void softmax_row(float* row, int64_t t, int64_t n) {
  namespace at = k::TESSEL_KERNEL_ISA::attention_tiles;
  using V = at::Vec<float>;
  constexpr int kL = at::kLanes<float>;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t j = n; j < t; ++j) row[j] = kNegInf;
  V mv = V{} + kNegInf;
  for (int64_t j = 0; j < t; j += kL) {
    V x = at::load(row + j);
    mv = mv < x ? x : mv;
  }
  float mx = kNegInf;
  for (int l = 0; l < kL; ++l) mx = std::max(mx, mv[l]);
  V sv{};
  for (int64_t j = 0; j < t; j += kL) {
    V e = at::exp_softmax(at::load(row + j) - mx);
    at::store(row + j, e);
    sv += e;
  }
  float sum = 0;
  for (int l = 0; l < kL; ++l) sum += sv[l];
  for (int64_t j = 0; j < t; j += kL) at::store(row + j, at::load(row + j) * (1.0f / sum));
}

// Unfused forward: per batch, S = Q K^T for all heads (one strided-batched GEMM over heads),
// a causal softmax over each materialised T x T row, then O = P V (another batched GEMM). The
// causal FLOPs are counted as halved, like the fused kernel's, although the GEMMs do them all.
void bm_unfused_forward(benchmark::State& state, int64_t t, bool causal) {
  Problem p(4, t, 12, 64, causal);
  const int64_t h = 12, d = 64;
  Tensor scores = tessel::zeros({h, t, t});
  k::GemmDesc qk{h, t, t, d, false, true, h * d, h * d, t, d, d, t * t, p.desc.scale, 0.0};
  k::GemmDesc pv{h, t, d, t, false, false, t, h * d, h * d, t * t, d, d, 1.0, 0.0};
  float* s = scores.data<float>();
  for (auto _ : state) {
    for (int64_t b = 0; b < 4; ++b) {
      Tensor qb = p.q.narrow(0, b, 1), kb = p.kk.narrow(0, b, 1), vb = p.v.narrow(0, b, 1);
      Tensor ob = p.out.narrow(0, b, 1);
      k::cpu_backend().gemm(qk, qb, kb, scores);
      tessel::parallel_for(0, h * t, 16, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) softmax_row(s + r * t, t, causal ? r % t + 1 : t);
      });
      k::cpu_backend().gemm(pv, scores, vb, ob);
    }
  }
  set_rate(state, p.forward_flops());
}

}  // namespace
TESSEL_ISA_END

int main(int argc, char** argv) {
  for (int64_t t : {256, 1024}) {
    for (bool causal : {true, false}) {
      std::string tag =
          std::string(causal ? "causal" : "full") + "/B4xH12xD64xT" + std::to_string(t);
      benchmark::RegisterBenchmark(("attention_fwd/fused/" + tag).c_str(), bm_forward, t, causal)
          ->UseRealTime();
      if (k::cpu_runs_kernel_set(k::KernelSet::Avx2))
        benchmark::RegisterBenchmark(("attention_fwd/unfused_gemm/" + tag).c_str(),
                                     bm_unfused_forward, t, causal)
            ->UseRealTime();
      benchmark::RegisterBenchmark(("attention_bwd/fused/" + tag).c_str(), bm_backward, t, causal)
          ->UseRealTime();
    }
  }
  // T=4096 (fwdbwd only) shows the scaling: T^2 without a window, T * window with one.
  for (int64_t t : {1024, 4096})
    for (int64_t window : {0, 256}) {
      std::string tag = "gqa/causal" +
                        (window > 0 ? "_w" + std::to_string(window) : std::string()) +
                        "/B1xH8xKV2xD64xT" + std::to_string(t);
      if (t == 1024) {
        benchmark::RegisterBenchmark(("attention_fwd/" + tag).c_str(), bm_gqa_forward, t, window)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("attention_bwd/" + tag).c_str(), bm_gqa_backward, t, window)
            ->UseRealTime();
      }
      benchmark::RegisterBenchmark(("attention_fwdbwd/" + tag).c_str(), bm_gqa_fwdbwd, t, window)
          ->UseRealTime();
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
