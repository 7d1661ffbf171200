// SPDX-License-Identifier: Apache-2.0
// Activation recomputation (nn::Recompute) on a small GPT-2 with dropout on: every mode gives
// bitwise the gradients, loss and generator state of Recompute::None, and the activation memory
// the allocator measures falls strictly from none to selective to full.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "tessel/autograd/autograd.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/tensor/allocator.h"

namespace tessel::models {
namespace {

using nn::Recompute;

constexpr int64_t kBatch = 3, kSeq = 13;

GPT2Config odd_config() {
  GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 17;
  c.n_embd = 39;
  c.n_head = 3;
  c.n_layer = 3;
  c.resid_pdrop = c.embd_pdrop = 0.1;  // dropout on, so the recomputation must replay the masks
  c.attn_pdrop = 0.0;                  // not applied by the fused attention anyway
  return c;
}

Tensor tokens(uint64_t seed) {
  std::vector<int64_t> v(size_t(kBatch * kSeq));
  for (auto& x : v) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x = int64_t((seed >> 33) % 97);
  }
  return from_data(v, Shape{kBatch, kSeq});
}

struct Step {
  double loss = 0;
  std::vector<std::vector<char>> grads;  // raw bytes, in parameter order
  int64_t saved = 0;  // bytes still held after the forward: what backward will read
  int64_t peak = 0;   // peak over forward + backward, above the bytes in use before the forward
};

struct Trace {
  std::vector<Step> steps;
  uint64_t generator_offset = 0;
};

// Two forward/backward passes without zeroing the gradients in between: the first allocates the
// gradient buffers, so the second's peak counts activations, their gradients and backward
// temporaries, not the gradient buffers themselves.
// With `own_generator` the model's init and dropout draw from a generator of the test's; without,
// from the process-wide one (which checkpoint restores without being told).
// `count`: the mode on the first blocks only (train.recompute's `mode:N`), `rest` on the others.
Trace train_twice(Recompute mode, bool own_generator = true, int64_t count = nn::kAllBlocks,
                  Recompute rest = Recompute::None) {
  Generator g(20261129);
  default_generator().set_state(20261129, 0);
  auto model = own_generator ? GPT2::random(odd_config(), g) : std::make_shared<GPT2>(odd_config());
  set_rank_recompute(*model, mode, count, {0, 1, 2}, rest);
  model->train();
  Trace run;
  for (int s = 0; s < 2; ++s) {
    Tensor ids = tokens(7 + s), targets = tokens(101 + s);
    Allocator& a = cpu_allocator();
    const int64_t before = int64_t(a.bytes_in_use());
    a.reset_peak();
    Step step;
    Tensor loss = model->loss(ids, targets);
    step.saved = int64_t(a.bytes_in_use()) - before;
    step.loss = loss.item();
    autograd::backward(loss);
    loss = Tensor();
    step.peak = int64_t(a.peak_bytes()) - before;
    for (const Tensor& p : model->parameters()) {
      const Tensor grad = p.grad().contiguous_copy();
      const char* bytes = static_cast<const char*>(grad.data_ptr());
      step.grads.emplace_back(bytes, bytes + grad.nbytes());
    }
    run.steps.push_back(std::move(step));
  }
  run.generator_offset = own_generator ? g.offset() : default_generator().offset();
  return run;
}

// `t`'s losses, gradients and generator position bit for bit those of `none`.
void expect_bitwise_equal(const Trace& t, const Trace& none, const std::string& name) {
  EXPECT_EQ(t.generator_offset, none.generator_offset) << name;
  ASSERT_EQ(t.steps.size(), none.steps.size()) << name;
  for (size_t s = 0; s < none.steps.size(); ++s) {
    EXPECT_EQ(std::memcmp(&t.steps[s].loss, &none.steps[s].loss, sizeof(double)), 0)
        << name << " step " << s;
    ASSERT_EQ(t.steps[s].grads.size(), none.steps[s].grads.size()) << name;
    for (size_t i = 0; i < none.steps[s].grads.size(); ++i)
      EXPECT_TRUE(t.steps[s].grads[i] == none.steps[s].grads[i])
          << name << " step " << s << ": gradient of parameter " << i << " differs";
  }
}

void expect_bitwise_equal_to_none(bool own_generator) {
  const Trace none = train_twice(Recompute::None, own_generator);
  for (Recompute mode : {Recompute::Selective, Recompute::Full})
    expect_bitwise_equal(train_twice(mode, own_generator), none,
                         std::string(nn::recompute_name(mode)));
}

TEST(GPT2Recompute, EveryModeGivesBitwiseTheGradientsOfNone) {
  expect_bitwise_equal_to_none(/*own_generator=*/true);
}

TEST(GPT2Recompute, EveryModeGivesBitwiseTheGradientsOfNoneWithTheProcessGenerator) {
  expect_bitwise_equal_to_none(/*own_generator=*/false);
}

TEST(GPT2Recompute, MeasuredActivationMemoryFallsFromNoneToSelectiveToFull) {
  std::vector<Step> measured;
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    measured.push_back(train_twice(mode).steps.back());
    std::cout << "recompute=" << nn::recompute_name(mode) << " saved=" << measured.back().saved
              << " B peak=" << measured.back().peak << " B\n";
  }
  EXPECT_GT(measured[0].saved, measured[1].saved);
  EXPECT_GT(measured[1].saved, measured[2].saved);
  EXPECT_GT(measured[0].peak, measured[1].peak);
  EXPECT_GT(measured[1].peak, measured[2].peak);
}

// A mode on the first N blocks only (train.recompute = "full:2"): bitwise the gradients of none,
// and activation memory between none and the mode on every block, falling with N.
TEST(GPT2Recompute, TheFirstBlocksOnlyGiveBitwiseTheGradientsOfNoneAndMemoryBetween) {
  const Trace none = train_twice(Recompute::None);
  for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
    std::vector<int64_t> saved = {none.steps.back().saved};
    for (int64_t count : {int64_t(1), int64_t(2), nn::kAllBlocks}) {
      const Trace t = train_twice(mode, true, count);
      const std::string name = std::string(nn::recompute_name(mode)) + ":" + std::to_string(count);
      expect_bitwise_equal(t, none, name);
      saved.push_back(t.steps.back().saved);
      std::cout << "recompute=" << name << " saved=" << saved.back() << " B\n";
    }
    for (size_t i = 1; i < saved.size(); ++i) EXPECT_GT(saved[i - 1], saved[i]) << i;
  }
}

// A stronger mode on the first blocks and a weaker one on the others (train.recompute =
// "full:1+selective"): bitwise the gradients of none, and activation memory strictly between the
// weaker mode on every block and the stronger one on every block, falling with the count.
TEST(GPT2Recompute, AStrongerModeOnTheFirstBlocksAndAWeakerOnTheRestGiveTheGradientsOfNone) {
  const Trace none = train_twice(Recompute::None);
  const int64_t selective = train_twice(Recompute::Selective).steps.back().saved;
  const int64_t full = train_twice(Recompute::Full).steps.back().saved;
  std::vector<int64_t> saved = {selective};
  for (int64_t count : {int64_t(1), int64_t(2)}) {
    const Trace t = train_twice(Recompute::Full, true, count, Recompute::Selective);
    const std::string name = "full:" + std::to_string(count) + "+selective";
    expect_bitwise_equal(t, none, name);
    saved.push_back(t.steps.back().saved);
    std::cout << "recompute=" << name << " saved=" << saved.back() << " B\n";
    // Not the same as the stronger mode on these blocks alone (the others none).
    EXPECT_LT(saved.back(), train_twice(Recompute::Full, true, count).steps.back().saved) << name;
  }
  saved.push_back(full);
  for (size_t i = 1; i < saved.size(); ++i) EXPECT_GT(saved[i - 1], saved[i]) << i;
}

TEST(GPT2Recompute, SetRankRecomputeTakesTheRanksFirstBlocks) {
  Generator g(1);
  auto model = GPT2::random(odd_config(), g);
  model->set_recompute(Recompute::Selective);
  // A rank running blocks 2 and 0 (in that order): block 2 only, every other block none.
  set_rank_recompute(*model, Recompute::Full, 1, {2, 0});
  EXPECT_EQ(model->blocks[0]->recompute(), Recompute::None);
  EXPECT_EQ(model->blocks[1]->recompute(), Recompute::None);
  EXPECT_EQ(model->blocks[2]->recompute(), Recompute::Full);
  set_rank_recompute(*model, Recompute::Selective, nn::kAllBlocks, {});
  for (auto& block : model->blocks) EXPECT_EQ(block->recompute(), Recompute::Selective);
  // The others take the rest's mode: blocks this rank does not run too (they never run).
  set_rank_recompute(*model, Recompute::Full, 1, {2, 0}, Recompute::Selective);
  EXPECT_EQ(model->blocks[0]->recompute(), Recompute::Selective);
  EXPECT_EQ(model->blocks[2]->recompute(), Recompute::Full);
  // A count of every block leaves no block to the rest.
  set_rank_recompute(*model, Recompute::Full, nn::kAllBlocks, {}, Recompute::Selective);
  for (auto& block : model->blocks) EXPECT_EQ(block->recompute(), Recompute::Full);
  try {
    set_rank_recompute(*model, Recompute::Full, 3, {1, 2});
    FAIL() << "three blocks of two were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("full:3 names more blocks than the 2 this rank runs"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model->set_block_recompute(3, Recompute::Full), Error);
}

TEST(GPT2Recompute, WithoutGradModeEveryModeRunsTheBlockOnceWithTheSameOutput) {
  std::vector<std::vector<float>> logits;
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    Generator g(5);
    auto model = GPT2::random(odd_config(), g);
    model->set_recompute(mode);
    model->eval();
    autograd::NoGradGuard no_grad;
    Tensor out = model->forward(tokens(3));
    EXPECT_FALSE(out.requires_grad());
    logits.push_back(out.to_vector<float>());
  }
  EXPECT_EQ(logits[1], logits[0]);
  EXPECT_EQ(logits[2], logits[0]);
}

TEST(GPT2Recompute, SetRecomputeReachesEveryBlock) {
  Generator g(1);
  auto model = GPT2::random(odd_config(), g);
  EXPECT_EQ(model->recompute(), Recompute::None);
  model->set_recompute(Recompute::Selective);
  EXPECT_EQ(model->recompute(), Recompute::Selective);
  for (auto& block : model->blocks) EXPECT_EQ(block->recompute(), Recompute::Selective);
}

TEST(GPT2Recompute, ModeNamesRoundTripAndUnknownNamesAreErrors) {
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full})
    EXPECT_EQ(nn::parse_recompute(nn::recompute_name(mode)), mode);
  try {
    nn::parse_recompute("partial");
    FAIL() << "no error for an unknown mode";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"partial\" is not one of none, selective, full"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(nn::parse_recompute("Full"), Error);
  EXPECT_THROW(nn::parse_recompute(""), Error);
}

}  // namespace
}  // namespace tessel::models
