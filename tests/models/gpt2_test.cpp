// SPDX-License-Identifier: Apache-2.0
// The GPT-2 forward pass: shapes, the tied head, loss against a hand-computed cross-entropy,
// greedy decoding limits, bad inputs, and the TESSEL_DUMP_DIR activation dump.
#include "tessel/models/gpt2/gpt2.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/scratch_dir.h"
#include "common/tolerance.h"
#include "tessel/autograd/autograd.h"
#include "tessel/io/safetensors.h"

namespace tessel::models {
namespace {

GPT2Config tiny_config() {
  GPT2Config c;
  c.vocab_size = 33;
  c.n_positions = 13;
  c.n_embd = 12;
  c.n_head = 3;
  c.n_layer = 2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

TEST(GPT2, ForwardShapesAndTiedHead) {
  Generator g(1);
  auto model = GPT2::random(tiny_config(), g);
  EXPECT_FALSE(model->lm_head);
  EXPECT_TRUE(model->lm_head_weight().is_same(model->wte->weight));
  Tensor ids =
      from_data(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 0, 32, 31, 30, 29, 28, 27}, Shape{2, 7});
  EXPECT_EQ(model->forward(ids).shape(), (Shape{2, 7, 33}));
  EXPECT_EQ(model->named_parameters().front().first, "wte.weight");
  EXPECT_EQ(model->named_parameters().back().first, "ln_f.bias");
}

TEST(GPT2, LossIsMeanCrossEntropyOfTheLogits) {
  Generator g(2);
  auto model = GPT2::random(tiny_config(), g);
  std::vector<int64_t> ids_v = {3, 9, 27, 1, 0, 12, 5}, tgt_v = {9, 27, 1, 0, 12, 5, 8};
  Tensor ids = from_data(ids_v, Shape{1, 7}), targets = from_data(tgt_v, Shape{1, 7});
  auto logits = model->forward(ids).to_vector<double>();
  double want = 0;
  for (int t = 0; t < 7; ++t) {
    double mx = -1e300, z = 0;
    for (int v = 0; v < 33; ++v) mx = std::max(mx, logits[t * 33 + v]);
    for (int v = 0; v < 33; ++v) z += std::exp(logits[t * 33 + v] - mx);
    want += (std::log(z) + mx - logits[t * 33 + tgt_v[t]]) / 7;
  }
  Tensor loss = model->loss(ids, targets);
  // The f32 loss against f64 from the same logits: the derived element-wise bound
  // (tests/common/tolerance.h) for 33 classes through softmax and the mean (2 stages), about 4e-5
  // (was 1e-5); a wrong target index or a missing max shift is off by O(1).
  EXPECT_NEAR(
      loss.item(), want,
      tessel::test::elementwise_tolerance(DType::F32, 33, 2, std::max(1.0, std::abs(want))));
  autograd::backward(loss);
  for (auto& [name, p] : model->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(GPT2, BadInputsNameTheProblem) {
  Generator g(3);
  auto model = GPT2::random(tiny_config(), g);
  auto expect_msg = [](const std::function<void()>& fn, const std::string& part) {
    try {
      fn();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_msg(
      [&] {
        model->forward(zeros({1, 14}, DType::I64));
      },
      "sequence length 14 outside [1, max_positions = 13]");
  expect_msg([&] { model->forward(zeros({7}, DType::I64)); }, "expected i32/i64 [B, T]");
  expect_msg([&] { model->forward(zeros({1, 7}, DType::F32)); }, "expected i32/i64 [B, T]");
  expect_msg(
      [&] {
        model->loss(zeros({1, 7}, DType::I64), zeros({1, 6}, DType::I64));
      },
      "GPT2.loss: targets [1, 6]");
  expect_msg([&] { model->generate_greedy(std::vector<int64_t>(14, 1), 1); },
             "prompt of 14 tokens is longer than max_positions 13");
  expect_msg([&] { model->generate_greedy({1}, -1); }, "steps -1 must be >= 0");
  expect_msg([&] { model->generate_greedy({}, 1); }, "empty prompt");
}

TEST(GPT2, GreedyDecodingPicksTheArgmaxOfTheLastPosition) {
  Generator g(4);
  auto model = GPT2::random(tiny_config(), g);
  // 10 + 7 tokens run past n_positions = 13: the last steps see a sliding window.
  std::vector<int64_t> prompt = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  std::vector<int64_t> out = model->generate_greedy(prompt, 7);
  ASSERT_EQ(out.size(), 7u);
  std::vector<int64_t> seq = prompt;
  for (int64_t next : out) {
    std::vector<int64_t> window(seq.end() - std::min<size_t>(seq.size(), 13), seq.end());
    const int64_t t = int64_t(window.size());
    auto logits = model->forward(from_data(window, Shape{1, t})).to_vector<float>();
    int64_t best = 0;
    for (int64_t v = 0; v < 33; ++v) {
      if (logits[(t - 1) * 33 + v] > logits[(t - 1) * 33 + best]) best = v;
    }
    EXPECT_EQ(next, best);
    seq.push_back(next);
  }
}

TEST(GPT2, DumpDirReceivesEveryNamedIntermediate) {
  namespace fs = std::filesystem;
  const fs::path dir = tessel::test::scratch_path("tessel_gpt2_dump", /*create=*/false);
  Generator g(5);
  auto model = GPT2::random(tiny_config(), g);
  Tensor ids = from_data(std::vector<int64_t>{1, 2, 3, 4, 5}, Shape{1, 5});
  ::setenv("TESSEL_DUMP_DIR", dir.c_str(), 1);
  Tensor logits = model->forward(ids);
  ::unsetenv("TESSEL_DUMP_DIR");
  auto file = io::SafetensorsFile::open((dir / "activations-0000.safetensors").string());
  for (const char* name :
       {"wte", "wpe", "embd", "h.0.ln_1", "h.0.attn.c_attn", "h.0.attn.q", "h.0.attn.k",
        "h.0.attn.v", "h.0.attn.y", "h.0.attn", "h.0.resid_attn", "h.0.ln_2", "h.0.mlp.c_fc",
        "h.0.mlp.act", "h.0.mlp", "h.1", "ln_f", "logits"}) {
    EXPECT_TRUE(file.contains(name)) << name;
  }
  EXPECT_EQ(file.entry("h.0.attn.q").shape, (Shape{1, 5, 3, 4}));
  EXPECT_EQ(file.load("logits").to_vector<float>(), logits.to_vector<float>());
  model->forward(ids);  // not dumped: the variable is unset
  EXPECT_FALSE(fs::exists(dir / "activations-0001.safetensors"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessel::models
