// SPDX-License-Identifier: Apache-2.0
// Times every op-harness case on the CPU backend (the cases the tests check are the cases we
// time). Counters: bytes_per_second from each case's declared traffic and FLOP/s from its flop
// count; a `read_bandwidth` benchmark gives the machine's streaming-read limit in the same run so
// memory-bound kernels can be read as a fraction of it.
//   build/bench/op_cases_bench --benchmark_filter='layer_norm|gelu|softmax'
#include <benchmark/benchmark.h>

#include "kernels/op_harness.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/kernel_set.h"

namespace tessel::testing {
namespace {

void read_bandwidth(benchmark::State& state) {
  const int64_t n = int64_t(1) << 27;  // 512 MiB of f32: far beyond any cache
  Tensor t = full({n}, 1.0);
  const float* p = t.data<float>();
  for (auto _ : state) {
    float total = tessel::kernels::stream_read_sum(p, n);
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

void run_case(benchmark::State& state, const OpCase* c) {
  Generator gen(1);
  Tensors inputs = c->make_inputs(gen);
  Tensors outputs = c->make_outputs(inputs);
  kernels::Backend& be = kernels::cpu_backend();
  for (auto _ : state) c->run(be, inputs, outputs);
  if (c->bytes > 0) state.SetBytesProcessed(int64_t(double(state.iterations()) * c->bytes));
  if (c->flops > 0)
    state.counters["FLOP/s"] =
        benchmark::Counter(c->flops * double(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace
}  // namespace tessel::testing

int main(int argc, char** argv) {
  using namespace tessel::testing;
  benchmark::RegisterBenchmark("read_bandwidth", read_bandwidth)->UseRealTime();
  for (const OpCase& c : all_op_cases())
    benchmark::RegisterBenchmark(c.name.c_str(), run_case, &c)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("threads", std::to_string(tessel::num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
