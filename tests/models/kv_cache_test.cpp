// SPDX-License-Identifier: Apache-2.0
// Incremental decoding with the key/value cache equals recomputing the full forward at every step
// (batch 1 and 2, a multi-token prefill and multi-token chunks after it), the cache's bounds and
// shape checks, and the prefill + decode loop of generate().
#include "tessel/models/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/tolerance.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/models/generation.h"
#include "tessel/models/gpt2/gpt2.h"

namespace tessel::models {
namespace {

GPT2Config odd_config() {
  GPT2Config c;
  c.vocab_size = 37;
  c.n_positions = 33;
  c.n_embd = 21;
  c.n_head = 3;
  c.n_layer = 2;
  c.initializer_range = 0.2;  // wider than GPT-2's, so every path moves the logits
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

std::vector<int64_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[size_t(i)] = int64_t(uniform_at(seed, 0, uint64_t(i)) * float(vocab)) % vocab;
  return ids;
}

// Columns [start, start + len) of a row-major [B, T] id matrix.
Tensor columns(const std::vector<int64_t>& ids, int64_t b, int64_t t, int64_t start, int64_t len) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t j = start; j < start + len; ++j) out.push_back(ids[size_t(r * t + j)]);
  }
  return from_data(out, Shape{b, len});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// forward_step on a chunk against forward on the whole prefix: the same f32 sums, but the GEMMs
// and attention run on other shapes, so their blocking (and a vector width's) orders the sums
// differently. The derived element-wise bound (tests/common/tolerance.h) for two f32 evaluations
// (twice elementwise_tolerance) of the MLP's 4 * 21 = 84 terms through n_layer + 2 = 4 stages,
// times the largest logit: about 1e-4, looser than the old 1e-5 by 10-20x because 1e-5 held only
// for one machine's blocking; a stale, missing or misplaced cache entry moves logits by 1e-1.
double step_tol(const Tensor& full) {
  return 2 * tessel::test::elementwise_tolerance(
                 DType::F32, 4 * 21, 4, tessel::test::max_abs_of(full.to_vector<double>()));
}

// Feeds the sequence in chunks of the given sizes through forward_step and checks each chunk's
// logits against the full forward of everything up to the chunk's end.
void check_chunks(int64_t batch, const std::vector<int64_t>& chunks, uint64_t seed) {
  Generator g(seed);
  auto model = GPT2::random(odd_config(), g);
  model->eval();
  int64_t total = 0;
  for (int64_t c : chunks) total += c;
  const auto ids = random_ids(batch * total, 37, seed);
  KVCache cache = model->make_cache(batch);
  autograd::NoGradGuard no_grad;
  int64_t start = 0;
  for (int64_t len : chunks) {
    Tensor step = model->forward_step(columns(ids, batch, total, start, len), cache);
    ASSERT_EQ(step.shape(), (Shape{batch, len, 37}));
    Tensor full = model->forward(columns(ids, batch, total, 0, start + len));
    const double diff = max_abs_diff(step, full.slice(1, start, start + len));
    EXPECT_LE(diff, step_tol(full))
        << "batch " << batch << ", positions [" << start << ", " << start + len << ")";
    start += len;
    EXPECT_EQ(cache.length(), start);
  }
}

TEST(KVCache, StepByStepEqualsFullForwardBatch1) {
  check_chunks(1, {7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 11);
}

TEST(KVCache, StepByStepEqualsFullForwardBatch2) {
  check_chunks(2, {13, 1, 1, 1, 1, 1, 1, 1, 1}, 12);
}

TEST(KVCache, ChunksAfterPrefillAndFullContext) {
  // One-token prompt, chunks of several tokens, up to all 33 positions.
  check_chunks(3, {1, 3, 1, 7, 1, 13, 7}, 13);
}

TEST(KVCache, LogitsDoNotDependOnTheCacheCapacity) {
  Generator g(5);
  auto model = GPT2::random(odd_config(), g);
  const auto ids = random_ids(9, 37, 5);
  KVCache small = model->make_cache(1, 9), large = model->make_cache(1);
  Tensor a = model->forward_step(from_data(ids, Shape{1, 9}), small);
  Tensor b = model->forward_step(from_data(ids, Shape{1, 9}), large);
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
}

// Decode steps (fewer than four new tokens, no gradient) read the cache in place through the
// paged kernel, one block of `capacity` rows per sequence: their bits do not depend on the
// capacity, a batch's first row follows the sequence decoded alone, and both agree with the flash
// kernel that runs when a gradient is asked for.
TEST(KVCache, DecodeStepsReadTheCacheInPlace) {
  Generator g(8);
  auto model = GPT2::random(odd_config(), g);
  model->eval();
  const int64_t batch = 3, prompt = 7, steps = 5, total = prompt + steps;
  const auto ids = random_ids(batch * total, 37, 8);
  auto run = [&](int64_t rows, int64_t capacity, bool grad) {
    KVCache cache = model->make_cache(rows, capacity);
    std::vector<Tensor> out;
    autograd::NoGradGuard no_grad;
    model->forward_step(columns(ids, rows, total, 0, prompt), cache);
    for (int64_t t = prompt; t < total; t += 2) {
      const int64_t len = std::min<int64_t>(2, total - t);
      if (grad) {
        autograd::GradModeGuard on(true);
        out.push_back(model->forward_step(columns(ids, rows, total, t, len), cache));
      } else {
        out.push_back(model->forward_step(columns(ids, rows, total, t, len), cache));
      }
    }
    return out;
  };
  const auto batched = run(batch, 0, false), roomy = run(batch, 20, false),
             tight = run(batch, total, false), flash = run(batch, 0, true),
             alone = run(1, 0, false);
  for (size_t i = 0; i < batched.size(); ++i) {
    EXPECT_EQ(max_abs_diff(batched[i], roomy[i]), 0.0) << "step " << i;
    EXPECT_EQ(max_abs_diff(batched[i], tight[i]), 0.0) << "step " << i;
    // The products run on 3 or 1 rows (their blocking may round differently): step_tol.
    EXPECT_LE(max_abs_diff(batched[i].slice(0, 0, 1), alone[i]), step_tol(alone[i]))
        << "step " << i;
    EXPECT_LE(max_abs_diff(batched[i], flash[i]), step_tol(flash[i])) << "step " << i;
  }
}

TEST(KVCache, LastOnlyReturnsTheLastRowOfEachSequence) {
  Generator g(7);
  auto model = GPT2::random(odd_config(), g);
  const auto ids = random_ids(2 * 13, 37, 7);
  KVCache all = model->make_cache(2), last = model->make_cache(2);
  Tensor full = model->forward_step(columns(ids, 2, 13, 0, 13), all);
  Tensor tail = model->forward_step(columns(ids, 2, 13, 0, 13), last, /*last_only=*/true);
  ASSERT_EQ(tail.shape(), (Shape{2, 1, 37}));
  // The LM head GEMM runs on fewer rows, so its blocking (and rounding) may differ: step_tol.
  EXPECT_LE(max_abs_diff(tail, full.slice(1, 12, 13)), step_tol(full));
  EXPECT_EQ(last.length(), 13);  // the cache still holds every position
  Tensor next_all = model->forward_step(columns(ids, 2, 13, 12, 1), all);
  Tensor next_last = model->forward_step(columns(ids, 2, 13, 12, 1), last, /*last_only=*/true);
  EXPECT_EQ(max_abs_diff(next_all, next_last), 0.0);
}

TEST(KVCache, ResetStartsOver) {
  Generator g(6);
  auto model = GPT2::random(odd_config(), g);
  const auto ids = random_ids(5, 37, 6);
  KVCache cache = model->make_cache(1);
  Tensor first = model->forward_step(from_data(ids, Shape{1, 5}), cache);
  cache.reset();
  EXPECT_EQ(cache.length(), 0);
  Tensor again = model->forward_step(from_data(ids, Shape{1, 5}), cache);
  EXPECT_EQ(max_abs_diff(first, again), 0.0);
}

TEST(KVCache, BadUsesNameTheValues) {
  Generator g(7);
  auto model = GPT2::random(odd_config(), g);
  KVCache cache = model->make_cache(2, 8);
  EXPECT_EQ(cache.capacity(), 8);
  EXPECT_EQ(cache.nbytes(), size_t(2 * 2 * 2 * 8 * 21 * 4));
  try {
    model->forward_step(from_data(random_ids(9 * 2, 37, 1), Shape{2, 9}), cache);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9 new tokens after 0 cached exceed the capacity 8"),
              std::string::npos)
        << e.what();
  }
  try {
    model->forward_step(from_data(random_ids(3, 37, 1), Shape{1, 3}), cache);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model->make_cache(1, 34), Error);
  EXPECT_THROW(KVCache(2, 1, 0, 3, 7), Error);
  KVCache raw(1, 1, 4, 3, 7);
  EXPECT_THROW(raw.append(1, zeros({1, 1, 3, 7}), zeros({1, 1, 3, 7})), Error);
  EXPECT_THROW(raw.append(0, zeros({1, 1, 3, 6}), zeros({1, 1, 3, 6})), Error);
  EXPECT_THROW(raw.append(0, zeros({1, 1, 3, 7}, DType::F64), zeros({1, 1, 3, 7}, DType::F64)),
               Error);
  EXPECT_THROW(raw.append(0, zeros({1, 5, 3, 7}), zeros({1, 5, 3, 7})), Error);
  EXPECT_THROW(raw.advance(5), Error);
  EXPECT_EQ(cache.length(), 0);  // failed steps commit nothing
}

TEST(Generate, GreedyEqualsRecomputingGreedy) {
  Generator g(8);
  auto model = GPT2::random(odd_config(), g);
  model->eval();
  const std::vector<int64_t> prompt = {4, 36, 0, 17, 9};
  GenerationOptions options;
  options.max_new_tokens = 28;  // fills all 33 positions
  options.sampling.temperature = 0;
  std::vector<int64_t> streamed;
  options.on_token = [&](int64_t id) {
    streamed.push_back(id);
    return true;
  };
  const GenerationResult r = generate(*model, prompt, options);
  EXPECT_EQ(r.tokens, model->generate_greedy(prompt, 28));
  EXPECT_EQ(r.tokens, streamed);
  EXPECT_EQ(r.decode_forwards, 27);
  EXPECT_FALSE(r.stopped);
  EXPECT_FALSE(model->is_training());
}

TEST(Generate, StopsAtTheStopTokenAndOnRequest) {
  Generator g(9);
  auto model = GPT2::random(odd_config(), g);
  GenerationOptions options;
  options.max_new_tokens = 20;
  options.sampling.temperature = 0;
  const auto all = generate(*model, {1, 2, 3}, options).tokens;
  ASSERT_EQ(all.size(), 20u);
  options.stop_token = all[4];
  const auto stopped = generate(*model, {1, 2, 3}, options);
  const size_t first = size_t(std::find(all.begin(), all.end(), all[4]) - all.begin());
  EXPECT_EQ(stopped.tokens, std::vector<int64_t>(all.begin(), all.begin() + first + 1));
  EXPECT_TRUE(stopped.stopped);
  options.stop_token.reset();
  options.on_token = [n = 0](int64_t) mutable { return ++n < 3; };
  EXPECT_EQ(generate(*model, {1, 2, 3}, options).tokens.size(), 3u);
  EXPECT_TRUE(model->is_training());  // the mode it had is restored
}

TEST(Generate, RejectsTooLongAndBadPrompts) {
  Generator g(10);
  auto model = GPT2::random(odd_config(), g);
  GenerationOptions options;
  options.max_new_tokens = 4;
  try {
    generate(*model, std::vector<int64_t>(30, 1), options);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("30 tokens + 4 new tokens = 34 exceeds the context "
                                         "length max_positions = 33"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(generate(*model, {}, options), Error);
  EXPECT_THROW(generate(*model, {1, 37}, options), Error);
  EXPECT_THROW(generate(*model, {1, -1}, options), Error);
  options.sampling.top_p = 0;
  EXPECT_THROW(generate(*model, {1}, options), Error);
}

}  // namespace
}  // namespace tessel::models
