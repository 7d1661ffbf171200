// SPDX-License-Identifier: Apache-2.0
// tessel's Mixtral family against an independent PyTorch Mixtral: mixtral_reference.py (run by
// the CTest fixture) writes random MixtralForCausalLM models in the Hugging Face layout (one
// tensor per expert) and, in float64 from the same f32 weights, logits, loss, every gradient and
// 12 greedy ids. tessel loads each through the family registry (load_model), runs forward +
// backward in f32 and must match: logits within 1e-5 of the largest logit, loss and every
// gradient (each expert's slice of the stacked weights against its own HF tensor) within the
// derived f32 bound of tests/common/tolerance.h, and the greedy ids of its KV-cache decoding
// (and of recomputing the whole sequence) equal. Variants: odd sizes (hidden 33, 3 heads of an
// explicit head_dim 6, one KV head, 5 experts of 13), and 4 experts with a tied head and a
// sliding window of 5 over 13 tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/tolerance.h"
#include "parity_test_util.h"
#include "tessel/autograd/autograd.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/io/safetensors.h"
#include "tessel/models/family.h"
#include "tessel/models/mixtral/mixtral_family.h"
#include "tessel/ops/ops.h"

namespace tessel::models {
namespace {

std::string parity_dir() {
  const char* env = std::getenv("TESSEL_MIXTRAL_PARITY_DIR");
  return env != nullptr ? env : TESSEL_MIXTRAL_PARITY_DIR;
}

using tessel::test::max_diff;

int64_t argmax_last(const Tensor& logits) {
  Tensor last = logits.narrow(1, logits.size(1) - 1, 1).to(DType::F32);
  const float* p = last.data<float>();
  int64_t best = 0;
  for (int64_t v = 1; v < last.numel(); ++v)
    if (p[v] > p[best]) best = v;
  return best;
}

class MixtralParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = parity_dir() + "/" + GetParam();
    reference_ = std::make_unique<io::SafetensorsFile>(
        io::SafetensorsFile::open(dir + "/reference.safetensors"));
    auto model = load_model(dir + "/model");
    model_ = std::dynamic_pointer_cast<Llama>(model);
    ASSERT_NE(model_, nullptr) << "load_model did not build a Llama for " << GetParam();
    ASSERT_EQ(model_->model_config().family().name(), "mixtral");
  }
  Tensor ref(const std::string& name) const { return reference_->load(name); }
  const LlamaConfig& config() const { return model_->config(); }
  double tol(int64_t stages) const {
    const int64_t n = std::max(
        {config().vocab_size, config().intermediate_size, config().hidden, config().q_width()});
    return tessel::test::elementwise_tolerance(DType::F32, n, stages, 1.0);
  }
  int64_t depth() const { return config().num_hidden_layers + 2; }

  std::unique_ptr<io::SafetensorsFile> reference_;
  std::shared_ptr<Llama> model_;
};

TEST_P(MixtralParity, LogitsLossAndEveryGradientMatchTorch) {
  Tensor ids = ref("ids"), targets = ref("targets");
  model_->train();
  Tensor logits = model_->forward(ids);
  auto [logit_diff, logit_scale] = max_diff(logits, ref("logits"));
  EXPECT_LE(logit_diff / logit_scale, 1e-5)
      << "logits max abs diff " << logit_diff << " (max |logit| " << logit_scale << ")";

  const int64_t n = ids.numel(), v = config().vocab_size;
  Tensor loss = ops::cross_entropy(ops::reshape(logits, {n, v}), targets.reshape({n}));
  const double want_loss = ref("loss").item();
  EXPECT_LE(std::abs(loss.item() - want_loss), 1e-5 * std::max(1.0, std::abs(want_loss)))
      << "loss " << loss.item() << " vs torch " << want_loss;
  // Each layer routed every token to k experts and dropped none; the model collects the
  // layers' weighted auxiliary losses for training.
  const std::vector<ExpertLayerStats> stats = model_->expert_stats();
  ASSERT_EQ(int64_t(stats.size()), config().num_hidden_layers);
  for (const ExpertLayerStats& s : stats) {
    int64_t pairs = 0;
    for (int64_t c : s.stats.tokens_per_expert) pairs += c;
    EXPECT_EQ(pairs, n * config().num_experts_per_tok);
    EXPECT_EQ(s.stats.dropped, 0);
  }
  ASSERT_TRUE(model_->auxiliary_loss().defined());

  autograd::backward(loss);
  int compared = 0;
  double worst = 0;
  const auto check = [&](const std::string& hf, const Tensor& grad) {
    ASSERT_TRUE(reference_->contains("grad." + hf)) << hf;
    auto [diff, scale] = max_diff(grad, ref("grad." + hf));
    ASSERT_GT(scale, 0) << hf;
    EXPECT_LE(diff / scale, tol(2 * depth()))
        << "gradient of " << hf << ": max abs diff " << diff << ", max abs reference " << scale;
    worst = std::max(worst, diff / scale);
    ++compared;
  };
  for (auto& [name, p] : model_->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const std::string hf = mixtral_hf_name(name);
    if (p.ndim() != 3) {
      check(hf, p.grad());
      continue;
    }
    // A stack [E, out, in]: "model.layers.N.block_sparse_moe.experts.w1" -> ".experts.e.w1.weight".
    const size_t dot = hf.rfind('.');
    for (int64_t e = 0; e < p.size(0); ++e)
      check(hf.substr(0, dot) + "." + std::to_string(e) + hf.substr(dot) + ".weight",
            p.grad().narrow(0, e, 1).reshape({p.size(1), p.size(2)}));
  }
  RecordProperty("gradient_max_relative_error", std::to_string(worst));
  int stored = 0;
  for (auto& name : reference_->names()) stored += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(compared, stored);  // no reference gradient left unchecked
}

TEST_P(MixtralParity, GreedyIdsCachedAndRecomputedEqualTorch) {
  const std::vector<int64_t> prompt = ref("prompt").to_vector<int64_t>();
  const std::vector<int64_t> want = ref("greedy").to_vector<int64_t>();
  model_->eval();
  autograd::NoGradGuard no_grad;
  KVCache cache = model_->make_cache(1);
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
  EXPECT_EQ(model_->generate_greedy(prompt, int64_t(want.size())), want);
}

// Saved through the family (one tensor per expert) and loaded back: the same logits bit for bit.
TEST_P(MixtralParity, SaveAndLoadRoundTrips) {
  const std::string dir = ::testing::TempDir() + "mixtral_roundtrip_" + GetParam();
  save_model(*model_, dir);
  auto again = load_model(dir);
  std::filesystem::remove_all(dir);
  model_->eval();
  autograd::NoGradGuard no_grad;
  Tensor ids = ref("ids");
  auto [diff, scale] = max_diff(again->forward(ids), model_->forward(ids));
  EXPECT_EQ(diff, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Variants, MixtralParity, ::testing::Values("odd", "window"));

}  // namespace
}  // namespace tessel::models
