// SPDX-License-Identifier: Apache-2.0
// The products of one decode step of GPT-2 124M in f32, with every layer's weights distinct, so
// the weights stream from memory as they do in the serving engine (gemm_bench reuses one weight,
// which then sits in the caches): for M rows (default 16), each of the 12 layers' four products
// (qkv 2304 x 768, attn proj 768 x 768, MLP up 3072 x 768, MLP down 768 x 3072) and then the LM
// head (50,257 x 768), through CpuBackend::gemm. Prints the process CPU time and the wall time per
// step and per product kind, best of the repetitions. With one thread the CPU time is the figure
// to read on a loaded machine. DECODE_COPIES=1 reuses one weight per kind instead (from the
// caches: the kernel's rate without the memory).
// DECODE_SHAPES=2048x2048,5632x2048,2048x5632,32000x2048 runs another model's products (N x K each,
// the last the head).
//   DECODE_ROWS=16 DECODE_STEPS=20 TESSEL_NUM_THREADS=1 build/bench/decode_products_bench
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessel/kernels/backend.h"
#include "tessel/tensor/tensor.h"

namespace {

using tessel::DType;
using tessel::Tensor;

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double wall_seconds() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

struct Product {
  std::string name;
  int64_t n, k;
};

}  // namespace

int main() {
  const int64_t m = env_int("DECODE_ROWS", 16), steps = env_int("DECODE_STEPS", 20);
  const int64_t layers = 12, copies_per_kind = env_int("DECODE_COPIES", layers);
  std::vector<Product> kinds = {{"qkv 2304x768", 2304, 768},
                                {"attn proj 768x768", 768, 768},
                                {"mlp up 3072x768", 3072, 768},
                                {"mlp down 768x3072", 768, 3072},
                                {"lm head 50257x768", 50257, 768}};
  // DECODE_SHAPES=NxK,NxK,...: another model's products, the last one its head.
  if (const char* shapes = std::getenv("DECODE_SHAPES")) {
    kinds.clear();
    for (std::string rest = shapes; !rest.empty();) {
      const size_t comma = rest.find(',');
      const std::string one = rest.substr(0, comma);
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      const size_t x = one.find('x');
      if (x == std::string::npos) {
        std::fprintf(stderr, "DECODE_SHAPES: expected NxK, got '%s'\n", one.c_str());
        return 2;
      }
      kinds.push_back(
          {one, std::atoll(one.substr(0, x).c_str()), std::atoll(one.substr(x + 1).c_str())});
    }
  }
  tessel::kernels::Backend& be = tessel::kernels::cpu_backend();
  std::vector<std::vector<Tensor>> weights(kinds.size());
  std::vector<Tensor> inputs, outputs;
  for (size_t q = 0; q < kinds.size(); ++q) {
    const int64_t copies = q + 1 == kinds.size() ? 1 : copies_per_kind;
    for (int64_t l = 0; l < copies; ++l)
      weights[q].push_back(tessel::randn({kinds[q].n, kinds[q].k}, DType::F32));
    inputs.push_back(tessel::randn({m, kinds[q].k}, DType::F32));
    outputs.push_back(tessel::zeros({m, kinds[q].n}, DType::F32));
  }
  std::vector<double> best_cpu(kinds.size(), 1e30), best_wall(kinds.size(), 1e30);
  double best_step_cpu = 1e30, best_step_wall = 1e30, flops = 0;
  for (size_t q = 0; q < kinds.size(); ++q)
    flops += 2.0 * double(m * kinds[q].n * kinds[q].k) * double(q + 1 == kinds.size() ? 1 : layers);
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<double> cpu(kinds.size(), 0), wall(kinds.size(), 0);
    const double c0 = cpu_seconds(), w0 = wall_seconds();
    for (int64_t l = 0; l <= layers; ++l) {
      for (size_t q = 0; q < kinds.size(); ++q) {
        const bool head = q + 1 == kinds.size();
        if (head != (l == layers)) continue;
        const auto d = tessel::kernels::dense_gemm_desc(1, m, kinds[q].n, kinds[q].k, false, true);
        const double c = cpu_seconds(), w = wall_seconds();
        be.gemm(d, inputs[q], weights[q][head ? 0 : size_t(l % copies_per_kind)], outputs[q]);
        cpu[q] += cpu_seconds() - c, wall[q] += wall_seconds() - w;
      }
    }
    best_step_cpu = std::min(best_step_cpu, cpu_seconds() - c0);
    best_step_wall = std::min(best_step_wall, wall_seconds() - w0);
    for (size_t q = 0; q < kinds.size(); ++q)
      best_cpu[q] = std::min(best_cpu[q], cpu[q]), best_wall[q] = std::min(best_wall[q], wall[q]);
  }
  std::printf("rows %lld, %lld steps; best step: %.2f ms CPU (%.1f GFLOP/s of CPU), %.2f ms wall\n",
              static_cast<long long>(m), static_cast<long long>(steps), 1e3 * best_step_cpu,
              1e-9 * flops / best_step_cpu, 1e3 * best_step_wall);
  for (size_t q = 0; q < kinds.size(); ++q) {
    const double f =
        2.0 * double(m * kinds[q].n * kinds[q].k) * double(q + 1 == kinds.size() ? 1 : layers);
    std::printf("  %-20s %8.2f ms CPU %7.1f GFLOP/s  %8.2f ms wall\n", kinds[q].name.c_str(),
                1e3 * best_cpu[q], 1e-9 * f / best_cpu[q], 1e3 * best_wall[q]);
  }
  return 0;
}
