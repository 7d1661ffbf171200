// SPDX-License-Identifier: Apache-2.0
// `tessel bench [peak|kernels]`: measured machine limits (GEMM peak, memory read bandwidth) and
// kernel figures at GPT-2 shapes as fractions of those limits. One JSON object per line, so the
// output can be appended to a log and compared across runs and machines. Subcommands: `bench comm`
// (bench_comm.cpp), `bench generate` (bench_generate.cpp), `bench train` (bench_train.cpp) and
// `bench serve` (bench_serve.cpp).
#include <omp.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "tessel/cli/bench_timer.h"
#include "tessel/cli/commands.h"
#include "tessel/cli/device_option.h"
#include "tessel/core/cpu_features.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/gemm_rate.h"
#include "tessel/kernels/kernel_set.h"

namespace tessel::cli {

namespace {

using nlohmann::json;

using Limits = BenchLimits;

void emit(json j) {
  j["threads"] = num_threads();
  std::cout << j.dump() << std::endl;
}

}  // namespace

// A streaming read of 512 MiB of f32: the bandwidth floor of every memory-bound kernel (and of
// decoding).
ReadProbe::ReadProbe() : buffer_(full({int64_t(1) << 27}, 1.0)) {}

double ReadProbe::gbs(double budget) {
  const float* p = buffer_.data<float>();
  const int64_t n = buffer_.numel();
  volatile float sink = 0;
  Timing tm = time_it(
      [&] {
        float total = kernels::stream_read_sum(p, n);
        sink = total;
      },
      budget);
  (void)sink;
  return double(n) * 4.0 / tm.median_s / 1e9;
}

Limits bench_peak(double budget) {
  Limits lim;
  emit({{"bench", "peak"},
        {"figure", "kernel_set"},
        {"active", kernels::kernel_set_name(kernels::active_kernel_set())},
        {"cpu", cpu_features().names()}});
  for (int64_t s : {1024, 2048}) {
    double g = kernels::gemm_gflops(s, s, s, false, false, budget);
    emit({{"bench", "peak"}, {"figure", "gemm_f32"}, {"shape", {s, s, s}}, {"gflops", g}});
    lim.gemm_gflops = std::max(lim.gemm_gflops, g);
  }
  lim.read_gbs = ReadProbe().gbs(budget);
  emit({{"bench", "peak"}, {"figure", "read_bandwidth"}, {"gbs", lim.read_gbs}});
  return lim;
}

namespace {

// Memory-bound kernels at GPT-2 small activation shapes: B*T = 4096 rows of C = 768.
void bench_kernels(const Limits& lim, double budget) {
  kernels::Backend& be = kernels::cpu_backend();
  const int64_t rows = 4096, c = 768;
  Tensor x = randn({rows, c}), y = empty({rows, c});
  Tensor w = ones({c}), b = zeros({c}), mean = empty({rows}), rstd = empty({rows});
  auto report = [&](const char* name, double bytes, const std::function<void()>& fn) {
    Timing t = time_it(fn, budget);
    double gbs = bytes / t.median_s / 1e9;
    emit({{"bench", "kernels"},
          {"figure", name},
          {"shape", {rows, c}},
          {"ms", t.median_s * 1e3},
          {"gbs", gbs},
          {"fraction_of_read_bandwidth", gbs / lim.read_gbs}});
  };
  double rw = 2.0 * double(rows * c) * 4.0;  // read x, write y
  report("layer_norm_fwd", rw, [&] { be.layer_norm(x, w, b, 1e-5, y, mean, rstd); });
  report("gelu_fwd", rw, [&] { be.unary(kernels::UnaryOp::Gelu, x, y); });
  report("softmax_fwd", rw, [&] { be.softmax(x, y, false); });

  // The three GEMMs of a GPT-2 MLP up-projection (forward, input grad, weight grad).
  for (auto [name, ta, tb, m, n, k] : {std::tuple{"gemm_fwd_NT", false, true, rows, 3072L, c},
                                       std::tuple{"gemm_dgrad_NN", false, false, rows, c, 3072L},
                                       std::tuple{"gemm_wgrad_TN", true, false, 3072L, c, rows}}) {
    double g = kernels::gemm_gflops(m, n, k, ta, tb, budget);
    emit({{"bench", "kernels"},
          {"figure", name},
          {"shape", {m, n, k}},
          {"gflops", g},
          {"fraction_of_gemm_peak", g / lim.gemm_gflops}});
  }

  // Causal attention forward + backward at GPT-2 small shapes.
  const int64_t batch = 4, t = 256, heads = 12, hd = 64;
  kernels::AttentionDesc d{batch, t, t, heads, heads, hd, true, 0.125};
  Tensor q = randn({batch, t, heads, hd}), k = randn({batch, t, heads, hd}),
         v = randn({batch, t, heads, hd});
  Tensor out = empty({batch, t, heads, hd}), lse = empty({batch, heads, t});
  Tensor dq = empty_like(q), dk = empty_like(k), dv = empty_like(v),
         dout = randn({batch, t, heads, hd});
  double fwd_flops = 4.0 * double(batch * heads * t * t * hd) / 2.0;  // causal: half the scores
  Timing tf = time_it([&] { be.attention(d, q, k, v, Tensor(), out, lse); }, budget);
  Timing tb = time_it(
      [&] { be.attention_backward(d, q, k, v, Tensor(), out, lse, dout, dq, dk, dv); }, budget);
  emit({{"bench", "kernels"},
        {"figure", "attention_fwd_causal"},
        {"shape", {batch, t, heads, hd}},
        {"ms", tf.median_s * 1e3},
        {"gflops", fwd_flops / tf.median_s / 1e9},
        {"fraction_of_gemm_peak", fwd_flops / tf.median_s / 1e9 / lim.gemm_gflops}});
  emit({{"bench", "kernels"},
        {"figure", "attention_bwd_causal"},
        {"shape", {batch, t, heads, hd}},
        {"ms", tb.median_s * 1e3},
        {"gflops", 2.5 * fwd_flops / tb.median_s / 1e9},
        {"fraction_of_gemm_peak", 2.5 * fwd_flops / tb.median_s / 1e9 / lim.gemm_gflops}});
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("bench", "measure machine limits and kernels (one JSON line per figure)");
  static double budget = 0.5;
  static std::string what = "all";
  cmd->add_option("what", what, "peak | kernels | all")
      ->check(CLI::IsMember({"peak", "kernels", "all"}));
  cmd->add_option("--seconds", budget, "time budget per figure")->check(CLI::Range(0.01, 60.0));
  add_bench_comm_command(*cmd);
  add_bench_generate_command(*cmd);
  add_bench_train_command(*cmd);
  add_bench_serve_command(*cmd);
  add_device_option(*cmd);
  for (CLI::App* sub : cmd->get_subcommands({})) add_device_option(*sub);
  cmd->callback([cmd] {
    if (cmd->got_subcommand("comm") || cmd->got_subcommand("generate") ||
        cmd->got_subcommand("train") || cmd->got_subcommand("serve"))
      return;
    std::cerr << "tessel bench: " << what << ", " << num_threads() << " threads, " << budget
              << " s per figure\n";
    Limits lim = bench_peak(budget);
    if (what != "peak") bench_kernels(lim, budget);
  });
}

}  // namespace tessel::cli
