// SPDX-License-Identifier: Apache-2.0
// Activation recomputation (nn::Recompute, after Chen et al. 2016 and Korthikanti et al. 2022) on
// a GPT-2 124M-shaped model: for each mode, the activation memory the tensor allocator measures
// and the time of one training step (forward + backward), printed as one JSON line per mode.
//   recompute_bench [--batch B] [--seq T[,T...]] [--layers L] [--steps N]
// Memory is counted, not estimated: `saved_mib` is what the graph holds after the forward (what
// backward will read), `peak_mib` the peak over forward + backward above the bytes in use before
// the forward, with the gradient buffers already allocated by the previous step (so it counts
// activations, their gradients and backward temporaries), and `step_peak_mib` the same peak when
// the step starts with no gradients (as the trainer's steps do: gradient buffers included).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tessel/autograd/autograd.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/tensor/allocator.h"
#include "tessel/train/metrics/metrics.h"

namespace {

using namespace tessel;
using Clock = std::chrono::steady_clock;

struct Options {
  int64_t batch = 4, layers = 12, steps = 1;
  std::vector<int64_t> seqs = {64, 256};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    TESSEL_CHECK(i + 1 < argc, "recompute_bench: ", arg, " needs a value");
    const std::string value = argv[++i];
    if (arg == "--batch") {
      o.batch = std::stoll(value);
    } else if (arg == "--layers") {
      o.layers = std::stoll(value);
    } else if (arg == "--steps") {
      o.steps = std::stoll(value);
    } else if (arg == "--seq") {
      o.seqs.clear();
      std::stringstream list(value);
      for (std::string t; std::getline(list, t, ',');) o.seqs.push_back(std::stoll(t));
    } else {
      TESSEL_FAIL("recompute_bench: unknown option ", arg,
                  " (expected --batch, --seq, --layers, --steps)");
    }
  }
  TESSEL_CHECK(o.batch >= 1 && o.layers >= 1 && o.steps >= 1 && !o.seqs.empty(),
               "recompute_bench: --batch, --layers, --steps must be >= 1 and --seq non-empty");
  return o;
}

Tensor tokens(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> v(size_t(batch * seq));
  for (auto& x : v) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x = int64_t((seed >> 33) % uint64_t(vocab));
  }
  return from_data(v, Shape{batch, seq});
}

struct Measured {
  double saved = 0, peak = 0, ms = 0;
};

// One forward + backward; memory relative to the bytes in use before it.
Measured step(models::GPT2& model, const Tensor& ids, const Tensor& targets) {
  Allocator& a = cpu_allocator();
  const double before = double(a.bytes_in_use());
  a.reset_peak();
  const auto t0 = Clock::now();
  Measured m;
  Tensor loss = model.loss(ids, targets);
  m.saved = double(a.bytes_in_use()) - before;
  autograd::backward(loss);
  m.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  m.peak = double(a.peak_bytes()) - before;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    models::GPT2Config config = models::GPT2Config::preset("124M");
    config.n_layer = o.layers;
    config.attn_pdrop = 0.0;  // the fused attention applies none; this silences the warning
    Generator g(1234);
    auto model = models::GPT2::random(config, g);
    model->train();
    constexpr double kMiB = 1024.0 * 1024.0;
    for (int64_t seq : o.seqs) {
      const Tensor ids = tokens(o.batch, seq, config.vocab_size, 1);
      const Tensor targets = tokens(o.batch, seq, config.vocab_size, 2);
      const int64_t matmul_params = model->parameter_count() - config.n_positions * config.n_embd;
      const double model_flops =
          train::flops_per_token(matmul_params, config.n_layer, config.n_embd, seq);
      for (nn::Recompute mode :
           {nn::Recompute::None, nn::Recompute::Selective, nn::Recompute::Full}) {
        model->set_recompute(mode);
        model->zero_grad();
        const Measured cold = step(*model, ids, targets);  // warm-up; allocates the gradients
        Measured best;
        for (int64_t s = 0; s < o.steps; ++s) {
          const Measured m = step(*model, ids, targets);  // gradients already allocated
          if (s == 0 || m.ms < best.ms) best = m;
        }
        const double extra = config.recompute_flops_per_token(mode, seq);
        std::printf(
            "{\"mode\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"layers\": %lld, "
            "\"saved_mib\": %.1f, \"peak_mib\": %.1f, \"step_peak_mib\": %.1f, "
            "\"step_ms\": %.0f, \"recompute_flops_fraction\": %.3f}\n",
            std::string(nn::recompute_name(mode)).c_str(), (long long)o.batch, (long long)seq,
            (long long)config.n_layer, best.saved / kMiB, best.peak / kMiB, cold.peak / kMiB,
            best.ms, extra / model_flops);
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());  // tessel errors name the bench already
    return 1;
  }
}
