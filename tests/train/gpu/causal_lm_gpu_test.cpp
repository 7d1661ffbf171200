// SPDX-License-Identifier: Apache-2.0
// Models on a CUDA device against the same models on the host: GPT-2 and LLaMA (GQA, RoPE,
// RMSNorm, SwiGLU) built from one seed, the copy moved with nn::move_to_device, then the logits,
// the loss, every parameter's gradient and the parameters after three AdamW steps compared; and
// greedy generation with the KV cache giving the host's ids. Everything above the kernels runs
// unchanged: the ops dispatch on the tensors' device. f32 throughout: the two sides differ only
// in summation order (cuBLASLt and the CUDA kernels against the CPU's), so the bounds are f32
// rounding bounds. Part of tessel_train_gpu_tests (exit 77 where no GPU is visible).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/lcg_ids.h"
#include "common/small_llama.h"
#include "tessel/autograd/autograd.h"
#include "tessel/models/generation.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/nn/device_move.h"
#include "tessel/tensor/device_memory.h"
#include "tessel/train/optim/adamw.h"
#include "train/trainer_test_util.h"

namespace tessel::models {
namespace {

const Device kGpu = Device::cuda(0);

Tensor on_host(const Tensor& t) {
  return to_device(t, Device::cpu());
}

// ||a - b||^2 / ||b||^2 over f64 copies (b the host's).
double nmse(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = on_host(a).to_vector<double>();
  const std::vector<double> y = on_host(b).to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return den > 0 ? num / den : num;
}

// One model on the host and its twin on the GPU: the same forward, loss, gradients and three
// AdamW steps within f32 rounding.
void expect_twins_train_alike(CausalLM& host, CausalLM& gpu) {
  const int64_t vocab = host.model_config().vocabulary_size();
  ASSERT_GT(nn::move_to_device(gpu, kGpu), 0);
  for (const auto& [name, p] : gpu.named_parameters())
    ASSERT_EQ(p.device(), kGpu) << name << " stayed on " << p.device().str();

  const Tensor ids = test::lcg_ids(3, 13, 7, vocab), targets = test::lcg_ids(3, 13, 11, vocab);
  const Tensor gpu_ids = to_device(ids, kGpu), gpu_targets = to_device(targets, kGpu);
  {
    autograd::NoGradGuard no_grad;
    const Tensor logits = gpu.forward(gpu_ids);
    ASSERT_EQ(logits.device(), kGpu);
    EXPECT_LT(nmse(logits, host.forward(ids)), 1e-10);
  }
  train::AdamW host_opt(host.named_parameters(), {.weight_decay = 0.1});
  train::AdamW gpu_opt(gpu.named_parameters(), {.weight_decay = 0.1});
  for (int step = 0; step < 3; ++step) {
    host.zero_grad();
    gpu.zero_grad();
    Tensor host_loss = host.loss(ids, targets);
    Tensor gpu_loss = gpu.loss(gpu_ids, gpu_targets);
    const double hl = host_loss.item(), gl = on_host(gpu_loss).item();
    EXPECT_NEAR(gl, hl, 1e-5 * std::abs(hl)) << "step " << step;
    autograd::backward(host_loss);
    autograd::backward(gpu_loss);
    const auto hp = host.named_parameters(), gp = gpu.named_parameters();
    for (size_t i = 0; i < hp.size(); ++i) {
      ASSERT_TRUE(gp[i].second.grad().defined()) << gp[i].first;
      EXPECT_EQ(gp[i].second.grad().device(), kGpu) << gp[i].first;
      EXPECT_LT(nmse(gp[i].second.grad(), hp[i].second.grad()), 1e-9)
          << gp[i].first << " gradient, step " << step;
    }
    host_opt.step(1e-2);
    gpu_opt.step(1e-2);
    for (size_t i = 0; i < hp.size(); ++i) {
      Tensor got = on_host(gp[i].second), want = hp[i].second;
      if (gp[i].first.ends_with("attn.c_attn.bias")) {
        // The key part of the bias has an exact gradient of zero (softmax is invariant to a
        // shift shared by all keys), so both sides hold rounding noise there, which AdamW's
        // normalised step turns into +-lr of either sign. The query and value parts are compared.
        const int64_t c = got.size(0) / 3;
        got = concat({got.narrow(0, 0, c), got.narrow(0, 2 * c, c)}, 0);
        want = concat({want.narrow(0, 0, c), want.narrow(0, 2 * c, c)}, 0);
      }
      EXPECT_LT(nmse(got, want), 1e-11) << gp[i].first << " after step " << step;
    }
  }
}

// Greedy generation with the KV cache: the GPU's ids are the host's.
void expect_same_greedy_ids(CausalLM& host, CausalLM& gpu) {
  nn::move_to_device(gpu, kGpu);
  GenerationOptions options;
  options.max_new_tokens = 12;
  options.sampling.temperature = 0;
  const std::vector<int64_t> prompt = {3, 1, 4, 1, 5, 9, 2};
  const GenerationResult want = generate(host, prompt, options);
  const GenerationResult got = generate(gpu, prompt, options);
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.token_logits.size(), want.token_logits.size());
  for (size_t i = 0; i < got.token_logits.size(); ++i)
    EXPECT_NEAR(got.token_logits[i], want.token_logits[i], 1e-4) << "token " << i;
}

// Two models from one seed: the host's and the one to move.
template <class M, class Config>
std::pair<std::shared_ptr<M>, std::shared_ptr<M>> twins(const Config& config, uint64_t seed) {
  Generator a(seed), b(seed);
  return {M::random(config, a), M::random(config, b)};
}

TEST(CausalLmGpu, Gpt2TrainsLikeTheHost) {
  const auto [host, gpu] = twins<GPT2>(train::test::tiny_model(37), 5);
  expect_twins_train_alike(*host, *gpu);
}

TEST(CausalLmGpu, LlamaTrainsLikeTheHost) {
  const auto [host, gpu] = twins<Llama>(test::small_llama_config(), 5);
  expect_twins_train_alike(*host, *gpu);
}

TEST(CausalLmGpu, Gpt2GreedyIdsAreTheHosts) {
  const auto [host, gpu] = twins<GPT2>(train::test::tiny_model(37), 9);
  expect_same_greedy_ids(*host, *gpu);
}

TEST(CausalLmGpu, LlamaGreedyIdsAreTheHosts) {
  const auto [host, gpu] = twins<Llama>(test::small_llama_config(), 9);
  expect_same_greedy_ids(*host, *gpu);
}

TEST(CausalLmGpu, MovesBackToTheHost) {
  const auto [host, twin] = twins<GPT2>(train::test::tiny_model(37), 3);
  nn::move_to_device(*twin, kGpu);
  nn::move_to_device(*twin, Device::cpu());
  const auto hp = host->named_parameters(), tp = twin->named_parameters();
  for (size_t i = 0; i < hp.size(); ++i) {
    ASSERT_TRUE(tp[i].second.device().is_cpu()) << tp[i].first;
    EXPECT_EQ(tp[i].second.to_vector<float>(), hp[i].second.to_vector<float>()) << tp[i].first;
  }
}

}  // namespace
}  // namespace tessel::models
