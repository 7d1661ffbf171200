// SPDX-License-Identifier: Apache-2.0
// The cost of batch-invariant products (kernels/batch_invariant.h): GPT-2 124M's Linear forward
// shapes (x [m, k] times a weight [n, k] transposed) through CpuBackend::gemm with the mode off
// (oneDNN, or tessel's small-m path) and on (the fixed-order tiles), in f32 and bf16, at the row
// counts of serving steps from one decode token to a prefill chunk. docs/BENCHMARKS.md has the
// figures and the command.
#include <benchmark/benchmark.h>

#include <string>

#include "tessel/kernels/backend.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/tensor/tensor.h"

namespace {

using tessel::DType;
using tessel::Tensor;

struct Case {
  int64_t m, n, k;
  DType dtype;
  bool invariant;
};

void bm_linear(benchmark::State& state, Case s) {
  const Tensor a = tessel::randn({s.m, s.k}, DType::F32).to(s.dtype);
  const Tensor w = tessel::randn({s.n, s.k}, DType::F32).to(s.dtype);
  Tensor c = tessel::zeros({s.m, s.n}, s.dtype);
  const auto desc = tessel::kernels::dense_gemm_desc(1, s.m, s.n, s.k, false, true);
  tessel::kernels::Backend& be = tessel::kernels::cpu_backend();
  tessel::kernels::BatchInvariantScope mode(s.invariant);
  for (auto _ : state) be.gemm(desc, a, w, c);
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(s.m) * double(s.n) * double(s.k),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  // qkv, attention projection, MLP up, MLP down, LM head.
  const int64_t shapes[][2] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}, {50257, 768}};
  for (DType dt : {DType::F32, DType::BF16})
    for (const auto& nk : shapes)
      for (int64_t m : {1, 4, 16, 64, 256})
        for (bool inv : {false, true}) {
          const std::string name = std::string("linear/") + (dt == DType::F32 ? "f32" : "bf16") +
                                   (inv ? "/invariant/" : "/default/") + std::to_string(m) + "x" +
                                   std::to_string(nk[0]) + "x" + std::to_string(nk[1]);
          benchmark::RegisterBenchmark(name.c_str(), bm_linear, Case{m, nk[0], nk[1], dt, inv})
              ->UseRealTime();
        }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
