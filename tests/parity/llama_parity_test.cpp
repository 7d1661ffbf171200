// SPDX-License-Identifier: Apache-2.0
// tessel's LLaMA family against an independent PyTorch implementation: llama_reference.py (run by
// the CTest fixture) writes random models in the Hugging Face layout (config.json and
// model.safetensors, or shards with model.safetensors.index.json) and, in float64 from the same
// f32 weights, logits, loss, every gradient and 20 greedy ids of a KV-cache decoding loop. tessel
// loads each model through the family registry (load_model), runs forward + backward in f32 and
// must match: logits within 1e-5 of the largest logit, loss and every gradient within the derived
// f32 bound of tests/common/tolerance.h, the greedy ids of its own KV-cache decoding equal.
//
// Variants: GQA (untied), MQA (tied, with the tied lm_head.weight and rotary inv_freq buffers
// stored), odd sizes (hidden 7 x heads with an explicit head_dim, vocab 1009), rope_scaling
// linear (legacy "type" key), dynamic (sequences past max_position_embeddings), llama3 (all three
// wavelength bands), Qwen2 (q/k/v biases, tied, no lm_head stored), Mistral (sliding window 5 over
// 17 tokens), and a sharded Llama with attention_bias and mlp_bias.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/tolerance.h"
#include "parity_test_util.h"
#include "tessel/autograd/autograd.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/io/safetensors.h"
#include "tessel/models/family.h"
#include "tessel/models/llama/llama_family.h"
#include "tessel/ops/ops.h"

namespace tessel::models {
namespace {

std::string parity_dir() {
  const char* env = std::getenv("TESSEL_LLAMA_PARITY_DIR");
  return env != nullptr ? env : TESSEL_LLAMA_PARITY_DIR;
}

using tessel::test::max_diff;

int64_t argmax_last(const Tensor& logits) {
  Tensor last = logits.narrow(1, logits.size(1) - 1, 1).to(DType::F32);
  const float* p = last.data<float>();
  int64_t best = 0;
  for (int64_t v = 1; v < last.numel(); ++v)
    if (p[v] > p[best]) best = v;  // the first maximum wins, as in torch.argmax
  return best;
}

class LlamaParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = parity_dir() + "/" + GetParam();
    reference_ = std::make_unique<io::SafetensorsFile>(
        io::SafetensorsFile::open(dir + "/reference.safetensors"));
    auto model = load_model(dir + "/model");
    model_ = std::dynamic_pointer_cast<Llama>(model);
    ASSERT_NE(model_, nullptr) << "load_model did not build a Llama for " << GetParam();
  }
  Tensor ref(const std::string& name) const { return reference_->load(name); }
  const LlamaConfig& config() const { return model_->config(); }

  // The derived f32-against-f64 bound (tests/common/tolerance.h) for sums of up to n terms
  // through `stages` layers, relative to the largest value: the longest sum of the model is the
  // vocabulary (an embedding gradient) or the MLP width.
  double tol(int64_t stages) const {
    const int64_t n = std::max(
        {config().vocab_size, config().intermediate_size, config().hidden, config().q_width()});
    return tessel::test::elementwise_tolerance(DType::F32, n, stages, 1.0);
  }
  int64_t depth() const { return config().num_hidden_layers + 2; }

  std::unique_ptr<io::SafetensorsFile> reference_;
  std::shared_ptr<Llama> model_;
};

TEST_P(LlamaParity, LogitsLossAndEveryGradientMatchTorch) {
  Tensor ids = ref("ids"), targets = ref("targets");
  model_->train();
  Tensor logits = model_->forward(ids);
  auto [logit_diff, logit_scale] = max_diff(logits, ref("logits"));
  EXPECT_LE(logit_diff / logit_scale, 1e-5)
      << "logits max abs diff " << logit_diff << " (max |logit| " << logit_scale << ")";
  RecordProperty("logits_max_relative_error", std::to_string(logit_diff / logit_scale));

  const int64_t n = ids.numel(), v = config().vocab_size;
  Tensor loss = ops::cross_entropy(ops::reshape(logits, {n, v}), targets.reshape({n}));
  const double want_loss = ref("loss").item();
  EXPECT_LE(std::abs(loss.item() - want_loss), 1e-5 * std::max(1.0, std::abs(want_loss)))
      << "loss " << loss.item() << " vs torch " << want_loss;
  // The family's loss is the same computation.
  EXPECT_EQ(model_->loss(ids, targets).item(), loss.item());

  autograd::backward(loss);
  int compared = 0;
  double worst = 0;
  for (auto& [name, p] : model_->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const std::string hf = llama_family().hf_name(name);
    ASSERT_TRUE(reference_->contains("grad." + hf)) << hf;
    auto [diff, scale] = max_diff(p.grad(), ref("grad." + hf));
    ASSERT_GT(scale, 0) << hf;
    EXPECT_LE(diff / scale, tol(2 * depth()))
        << "gradient of " << hf << ": max abs diff " << diff << ", max abs reference " << scale;
    worst = std::max(worst, diff / scale);
    ++compared;
  }
  RecordProperty("gradient_max_relative_error", std::to_string(worst));
  int stored = 0;
  for (auto& name : reference_->names()) stored += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(compared, stored);  // no reference gradient left unchecked
  EXPECT_EQ(int64_t(compared), int64_t(model_->named_parameters().size()));
}

// generate(do_sample=False) with a KV cache: a prefill of the prompt, then one token per step.
TEST_P(LlamaParity, GreedyIdsWithTheKvCacheEqualTorch) {
  const std::vector<int64_t> prompt = ref("prompt").to_vector<int64_t>();
  const std::vector<int64_t> want = ref("greedy").to_vector<int64_t>();
  ASSERT_EQ(want.size(), 20u);
  model_->eval();
  autograd::NoGradGuard no_grad;
  KVCache cache = model_->make_cache(1);
  EXPECT_EQ(cache.n_head(), config().num_key_value_heads);  // GQA caches the KV heads only
  std::vector<int64_t> got;
  int64_t next = argmax_last(
      model_->forward_step(from_data(prompt, Shape{1, int64_t(prompt.size())}), cache, true));
  for (size_t s = 0; s < want.size(); ++s) {
    got.push_back(next);
    if (s + 1 < want.size())
      next = argmax_last(
          model_->forward_step(from_data(std::vector<int64_t>{next}, Shape{1, 1}), cache));
  }
  EXPECT_EQ(got, want);
  // Recomputing the whole sequence each step gives the same ids, except under dynamic scaling,
  // where decoding past max_position_embeddings keeps the cached keys' smaller base.
  if (config().rope_scaling.type != RopeScaling::Type::Dynamic) {
    EXPECT_EQ(model_->generate_greedy(prompt, int64_t(want.size())), want);
  }
}

// The cached path on the reference batch: a prefill of a few tokens, then chunks of one and
// several, each chunk's logits equal to the matching rows of the reference logits.
TEST_P(LlamaParity, CachedChunksMatchTorchLogits) {
  if (config().rope_scaling.type == RopeScaling::Type::Dynamic &&
      ref("ids").size(1) > config().max_position_embeddings)
    GTEST_SKIP() << "dynamic scaling: a chunk's tables depend on where the chunk ends";
  Tensor ids = ref("ids"), want = ref("logits");
  const int64_t b = ids.size(0), t = ids.size(1);
  model_->eval();
  autograd::NoGradGuard no_grad;
  KVCache cache = model_->make_cache(b, t);
  int64_t start = 0;
  for (int64_t len : {int64_t(4), int64_t(1), int64_t(5), t - 10}) {
    Tensor got = model_->forward_step(ids.slice(1, start, start + len), cache);
    auto [diff, scale] = max_diff(got, want.slice(1, start, start + len));
    EXPECT_LE(diff / scale, 1e-5) << "chunk [" << start << ", " << start + len << ")";
    start += len;
  }
  EXPECT_EQ(cache.length(), t);
}

INSTANTIATE_TEST_SUITE_P(Variants, LlamaParity,
                         ::testing::Values("gqa", "mqa", "odd", "linear", "dynamic", "llama3",
                                           "qwen2", "mistral", "sharded"));

}  // namespace
}  // namespace tessel::models
