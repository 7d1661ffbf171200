// SPDX-License-Identifier: Apache-2.0
// f32 GEMM throughput three ways on the same shapes: through tessel's CpuBackend::gemm (checks,
// primitive cache, oneDNN), by calling oneDNN's matmul directly (primitive made once), and by
// OpenBLAS cblas_sgemm, so that the wrapper's overhead and the library choice are both visible;
// and bf16 through CpuBackend::gemm (native or widened: TESSEL_BF16_GEMM).
// Shapes: square 1024 / 2048, the three products of a 768 -> 3072 linear layer (forward NN, dX NT,
// dW TN) at 256..2048 tokens, decode-sized products (1 and 8 rows) and one tiny product.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "tessel/kernels/backend.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/tensor/tensor.h"

namespace {

using tessel::DType;
using tessel::Tensor;
using tessel::kernels::GemmDesc;

struct Shape3 {
  std::string tag;
  int64_t m, n, k;
  bool ta, tb;
  int64_t ldb_pad = 0;  // extra elements per row of B
};

struct Operands {
  GemmDesc desc;
  Tensor a, b, c;
  explicit Operands(const Shape3& s)
      : desc(padded(s)),
        a(tessel::randn({s.m * s.k}, DType::F32)),
        b(tessel::randn({s.k * s.n + s.ldb_pad * (s.tb ? s.n : s.k)}, DType::F32)),
        c(tessel::zeros({s.m, s.n}, DType::F32)) {}
  static GemmDesc padded(const Shape3& s) {
    GemmDesc d = tessel::kernels::dense_gemm_desc(1, s.m, s.n, s.k, s.ta, s.tb);
    d.ldb += s.ldb_pad;
    return d;
  }
};

void set_rate(benchmark::State& state, const Shape3& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(s.m) * double(s.n) * double(s.k),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void bm_tessel(benchmark::State& state, Shape3 s) {
  Operands o(s);
  tessel::kernels::Backend& be = tessel::kernels::cpu_backend();
  for (auto _ : state) be.gemm(o.desc, o.a, o.b, o.c);
  set_rate(state, s);
}

// The same product with kernels::batch_invariant() on: the register-tiled kernel of
// gemm_invariant.cpp where it fits (A row-major, B transposed), else the same path as bm_tessel.
void bm_tessel_invariant(benchmark::State& state, Shape3 s) {
  Operands o(s);
  tessel::kernels::BatchInvariantScope invariant;
  tessel::kernels::Backend& be = tessel::kernels::cpu_backend();
  for (auto _ : state) be.gemm(o.desc, o.a, o.b, o.c);
  set_rate(state, s);
}

// The same product in bf16 through CpuBackend::gemm: oneDNN's bf16 matmul where the CPU has bf16
// arithmetic, else the widening path (TESSEL_BF16_GEMM=widen forces it, to compare the two).
void bm_tessel_bf16(benchmark::State& state, Shape3 s) {
  Operands o(s);
  const Tensor a = o.a.to(DType::BF16), b = o.b.to(DType::BF16);
  Tensor c = o.c.to(DType::BF16);
  tessel::kernels::Backend& be = tessel::kernels::cpu_backend();
  for (auto _ : state) be.gemm(o.desc, a, b, c);
  set_rate(state, s);
}

void bm_onednn(benchmark::State& state, Shape3 s) {
  Operands o(s);
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const GemmDesc& d = o.desc;
  memory::desc a_md({s.m, s.k}, memory::data_type::f32,
                    s.ta ? memory::dims{1, d.lda} : memory::dims{d.lda, 1});
  memory::desc b_md({s.k, s.n}, memory::data_type::f32,
                    s.tb ? memory::dims{1, d.ldb} : memory::dims{d.ldb, 1});
  memory::desc c_md({s.m, s.n}, memory::data_type::f32, memory::dims{d.ldc, 1});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  dnnl::matmul prim(pd);
  memory a_mem(a_md, eng, o.a.data_ptr()), b_mem(b_md, eng, o.b.data_ptr());
  memory c_mem(c_md, eng, o.c.data_ptr());
  for (auto _ : state) {
    prim.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
  }
  set_rate(state, s);
}

void bm_openblas(benchmark::State& state, Shape3 s) {
  Operands o(s);
  const GemmDesc& d = o.desc;
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                blasint(s.m), blasint(s.n), blasint(s.k), 1.0f, o.a.data<float>(), blasint(d.lda),
                o.b.data<float>(), blasint(d.ldb), 0.0f, o.c.data<float>(), blasint(d.ldc));
  set_rate(state, s);
}

std::vector<Shape3> shapes() {
  std::vector<Shape3> v = {{"square_nn/1024", 1024, 1024, 1024, false, false},
                           {"square_nn/2048", 2048, 2048, 2048, false, false}};
  // y = x W (W [768, 3072]): forward NN; dX = dY W^T: NT; dW = X^T dY: TN.
  for (int64_t t : {256, 512, 1024, 2048}) {
    std::string ts = std::to_string(t);
    v.push_back({"linear_fwd_nn/" + ts + "x3072x768", t, 3072, 768, false, false});
    v.push_back({"linear_dx_nt/" + ts + "x768x3072", t, 768, 3072, false, true});
    v.push_back({"linear_dw_tn/768x3072x" + ts, 768, 3072, t, true, false});
  }
  // The forward product again with B's rows 3088 instead of 3072 floats apart (not a multiple of
  // 4 KiB): shows what oneDNN's kernel loses to cache-set aliasing (docs/KERNELS.md).
  v.push_back({"linear_fwd_nn_ldb3088/256x3072x768", 256, 3072, 768, false, false, 16});
  // Fewer rows against the same aliasing B (row stride 3072 floats, 12 KiB).
  for (int64_t t : {8, 16, 32, 64, 128})
    v.push_back({"linear_fwd_nn/" + std::to_string(t) + "x3072x768", t, 3072, 768, false, false});
  // Decode steps of 1 to 64 streams against a [n, k] weight (the serving engine's batches).
  for (int64_t rows : {1, 4, 8, 16, 32, 64, 128})
    v.push_back({"decode_nt/" + std::to_string(rows) + "x3072x768", rows, 3072, 768, false, true});
  // GPT-2's LM head (50,257 x 768) for 1 and 16 sampled rows.
  for (int64_t rows : {1, 16})
    v.push_back(
        {"lm_head_nt/" + std::to_string(rows) + "x50257x768", rows, 50257, 768, false, true});
  // Small enough that the per-call cost of the wrapper shows.
  v.push_back({"small_nn/16x64x64", 16, 64, 64, false, false});
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  for (const Shape3& s : shapes()) {
    benchmark::RegisterBenchmark(("gemm/tessel/" + s.tag).c_str(), bm_tessel, s)->UseRealTime();
    if (s.tb && !s.ta)
      benchmark::RegisterBenchmark(("gemm/tessel_invariant/" + s.tag).c_str(), bm_tessel_invariant,
                                   s)
          ->UseRealTime();
    benchmark::RegisterBenchmark(("gemm/tessel_bf16/" + s.tag).c_str(), bm_tessel_bf16, s)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("gemm/onednn/" + s.tag).c_str(), bm_onednn, s)->UseRealTime();
    benchmark::RegisterBenchmark(("gemm/openblas/" + s.tag).c_str(), bm_openblas, s)->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
