// SPDX-License-Identifier: Apache-2.0
// The quantized GEMV (m = 1, the decode step) per GGUF weight format, against the machine's read
// bandwidth measured in the same process: `read_bandwidth` sums a 512 MiB f32 buffer over the
// pool (kernels::stream_read_sum, what `tessel bench peak` reports), `quant_gemv/<type>/<n>x<k>`
// multiplies one activation row by an n x k weight stored in <type>, and `f32_gemv` does the
// same through the f32 GEMM (its small-m path) as the unquantized baseline. The weights are
// copied until they fill 256 MiB and the copies are cycled, so that they come from memory, not
// the cache (QUANT_BENCH_HOT=1 keeps one copy: the kernel's compute rate on cache-resident
// weights). Both report "GB/s" of weight bytes read (for read_bandwidth: of the buffer).
// (q4_0x4 is Q4_0 regrouped four rows at a time, as a model holds it where the CPU's 512-bit decode
// rows read that layout: quant/q4_0_groups.h; q4_Kx4, q5_Kx4, q6_Kx4 the k-quants interleaved
// four rows at a time, as a model holds them where the SIMD rows read them:
// quant/row_interleave.h.) `quant_matmul/<type>/<k>x<n>/m<M>` multiplies M
// activation rows (a small decode batch, or a prompt's M tokens) and `f32_matmul/<k>x<n>/m<M>` does
// the same through the f32 GEMM; they also report "GFLOP/s". QUANT_BENCH_DOT=avx2|avx_vnni caps the
// byte dot product (kernel_set.h's limit_quant_dot) to compare them;
// QUANT_BENCH_SHAPES=2048x5632,... adds GEMV shapes (in x out, a model's own);
// QUANT_BENCH_ROWS=1,4,7 runs only quant_matmul at 4096 x 4096 for those m (CPU time: run with one
// thread); QUANT_BENCH_BITS=256 keeps the avx512 set's fused k-quant rows on 256-bit vectors
// (limit_quant_vector_bits); QUANT_BENCH_GFNI=0 keeps the Q4_K decode rows' shift-and-mask nibbles
// on a CPU with GFNI (limit_quant_gfni); TESSEL_KERNELS chooses the kernel set. docs/BENCHMARKS.md
// has the figures and the command.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tessel/kernels/backend.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/q4_0_groups.h"
#include "tessel/kernels/quant/quantize.h"
#include "tessel/kernels/quant/row_interleave.h"
#include "tessel/tensor/tensor.h"

namespace {

using tessel::DType;
using tessel::Tensor;
using tessel::kernels::quant::QuantType;

constexpr int64_t kColdBytes = int64_t(256) << 20;

int64_t weight_copies(int64_t bytes) {
  if (const char* hot = std::getenv("QUANT_BENCH_HOT"); hot != nullptr && hot[0] == '1') return 1;
  return std::max<int64_t>(1, kColdBytes / bytes);
}

void set_bandwidth(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_read_bandwidth(benchmark::State& state) {
  const int64_t n = (int64_t(512) << 20) / 4;
  Tensor buf = tessel::full({n}, 1.0, DType::F32);
  for (auto _ : state)
    benchmark::DoNotOptimize(tessel::kernels::stream_read_sum(buf.data<float>(), n));
  set_bandwidth(state, double(n) * 4);
}

void set_flops(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(m) * double(n) * double(k),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void bm_quant_matmul(benchmark::State& state, QuantType type, int64_t m, int64_t n, int64_t k) {
  Tensor wf = tessel::randn({n, k}, DType::F32);
  namespace quant = tessel::kernels::quant;
  // q4_0x4: Q4_0's rows regrouped four at a time (quant/q4_0_groups.h), as a model holds them.
  const bool grouped = type == QuantType::Q4_0x4;
  const QuantType stored = grouped ? QuantType::Q4_0 : quant::plain_form(type);
  std::vector<uint8_t> bytes = quant::quantize_rows(stored, wf.data<float>(), n, k);
  if (grouped) {
    std::vector<uint8_t> plain = bytes;
    quant::regroup_q4_0(plain.data(), n, k, bytes.data());
  } else if (quant::is_interleaved(type)) {
    std::vector<uint8_t> plain = bytes;
    quant::interleave_rows(stored, plain.data(), n, k, bytes.data());
  }
  const int64_t rb = tessel::kernels::quant::row_bytes(type, k);
  const int64_t copies = weight_copies(int64_t(bytes.size()));
  std::vector<Tensor> ws;
  for (int64_t c = 0; c < copies; ++c) {
    ws.push_back(tessel::empty({n, rb}, DType::I8));
    std::memcpy(ws.back().data_ptr(), bytes.data(), bytes.size());
  }
  Tensor x = tessel::randn({m, k}, DType::F32);
  Tensor y = tessel::zeros({m, n}, DType::F32);
  tessel::kernels::Backend& be = tessel::kernels::cpu_backend();
  size_t next = 0;
  for (auto _ : state) {
    be.quant_matmul(type, x, ws[next], y);
    next = (next + 1) % ws.size();
  }
  set_bandwidth(state, double(bytes.size()));
  if (m > 1) set_flops(state, m, n, k);
}

void bm_f32_matmul(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  const int64_t copies = weight_copies(n * k * 4);
  std::vector<Tensor> ws;
  for (int64_t c = 0; c < copies; ++c) ws.push_back(tessel::randn({n, k}, DType::F32));
  Tensor x = tessel::randn({m, k}, DType::F32);
  Tensor y = tessel::zeros({m, n}, DType::F32);
  const auto desc = tessel::kernels::dense_gemm_desc(1, m, n, k, false, true);
  tessel::kernels::Backend& be = tessel::kernels::cpu_backend();
  size_t next = 0;
  for (auto _ : state) {
    be.gemm(desc, x, ws[next], y);
    next = (next + 1) % ws.size();
  }
  set_bandwidth(state, double(n * k * 4));
  if (m > 1) set_flops(state, m, n, k);
}

struct Registrar {
  Registrar() {
    if (const char* dot = std::getenv("QUANT_BENCH_DOT"); dot != nullptr) {
      using tessel::kernels::QuantDot;
      const std::string d = dot;
      tessel::kernels::limit_quant_dot(d == "avx2"       ? QuantDot::Avx2
                                       : d == "avx_vnni" ? QuantDot::AvxVnni
                                                         : QuantDot::Avx512Vnni);
    }
    if (const char* bits = std::getenv("QUANT_BENCH_BITS"); bits != nullptr)
      tessel::kernels::limit_quant_vector_bits(std::atoi(bits));
    if (const char* gfni = std::getenv("QUANT_BENCH_GFNI"); gfni != nullptr && gfni[0] == '0')
      tessel::kernels::limit_quant_gfni(false);
    benchmark::RegisterBenchmark("read_bandwidth", bm_read_bandwidth)->UseRealTime();
    const QuantType kTypes[] = {QuantType::Q4_0,   QuantType::Q4_0x4, QuantType::Q4_K,
                                QuantType::Q4_Kx4, QuantType::Q5_K,   QuantType::Q5_Kx4,
                                QuantType::Q6_K,   QuantType::Q6_Kx4, QuantType::Q8_0,
                                QuantType::Q8_0x4, QuantType::BF16,   QuantType::F16};
    // [out, in]: GPT-2's MLP up-projection (768 -> 3072) and a 7B model's square projection.
    std::vector<std::array<int64_t, 2>> shapes = {{3072, 768}, {4096, 4096}};
    // QUANT_BENCH_SHAPES="IN1xOUT1,IN2xOUT2,...": other GEMV shapes (a model's own), named as
    // the built-in ones ([in]x[out]).
    if (const char* extra = std::getenv("QUANT_BENCH_SHAPES"); extra != nullptr) {
      std::string list = extra;
      for (size_t at = 0; at < list.size();) {
        size_t end = list.find(',', at);
        if (end == std::string::npos) end = list.size();
        const std::string item = list.substr(at, end - at);
        int64_t in = 0, out = 0;
        char tail = 0;
        if (std::sscanf(item.c_str(), "%ldx%ld%c", &in, &out, &tail) != 2 || in <= 0 || out <= 0) {
          std::fprintf(stderr, "QUANT_BENCH_SHAPES: '%s' is not IN x OUT (e.g. 2048x5632)\n",
                       item.c_str());
          std::exit(2);
        }
        shapes.push_back({out, in});
        at = end + 1;
      }
    }
    for (const auto& s : shapes) {
      const std::string shape = std::to_string(s[1]) + "x" + std::to_string(s[0]);
      for (QuantType t : kTypes)
        benchmark::RegisterBenchmark(
            ("quant_gemv/" + std::string(tessel::kernels::quant::quant_type_name(t)) + "/" + shape)
                .c_str(),
            bm_quant_matmul, t, 1, s[0], s[1])
            ->UseRealTime();
      benchmark::RegisterBenchmark(("f32_gemv/" + shape).c_str(), bm_f32_matmul, 1, s[0], s[1])
          ->UseRealTime();
    }
    // Batches: decode batches at the square shape (m = 3: the most the few-rows kernels take), a
    // 512-token prompt at GPT-2's three shapes (attention projection, MLP up and down).
    const int64_t kBatches[][3] = {{3, 4096, 4096},  {4, 4096, 4096}, {16, 4096, 4096},
                                   {64, 4096, 4096}, {512, 768, 768}, {512, 3072, 768},
                                   {512, 768, 3072}};
    for (const auto& b : kBatches) {
      const std::string shape =
          std::to_string(b[2]) + "x" + std::to_string(b[1]) + "/m" + std::to_string(b[0]);
      for (QuantType t : kTypes)
        if (t != QuantType::BF16 && t != QuantType::F16)
          benchmark::RegisterBenchmark(
              ("quant_matmul/" + std::string(tessel::kernels::quant::quant_type_name(t)) + "/" +
               shape)
                  .c_str(),
              bm_quant_matmul, t, b[0], b[1], b[2])
              ->UseRealTime();
      benchmark::RegisterBenchmark(("f32_matmul/" + shape).c_str(), bm_f32_matmul, b[0], b[1], b[2])
          ->UseRealTime();
    }
    // QUANT_BENCH_ROWS=1,4,7,...: the integer formats at 4096 x 4096 for just these activation
    // row counts (the AMX kernels' small-m and tile paths side by side), instead of the above.
    if (const char* rows = std::getenv("QUANT_BENCH_ROWS"); rows != nullptr) {
      benchmark::ClearRegisteredBenchmarks();
      for (const char* p = rows; *p != '\0';) {
        char* end = nullptr;
        const int64_t m = std::strtoll(p, &end, 10);
        if (end == p) break;
        for (QuantType t : kTypes)
          if (t != QuantType::BF16 && t != QuantType::F16)
            benchmark::RegisterBenchmark(
                ("quant_matmul/" + std::string(tessel::kernels::quant::quant_type_name(t)) +
                 "/4096x4096/m" + std::to_string(m))
                    .c_str(),
                bm_quant_matmul, t, m, 4096, 4096);
        p = *end == ',' ? end + 1 : end;
      }
    }
  }
} registrar;

}  // namespace

BENCHMARK_MAIN();
