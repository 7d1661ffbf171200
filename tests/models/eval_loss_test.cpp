// SPDX-License-Identifier: Apache-2.0
// Evaluation in chunks of positions (CausalLM::eval_loss): on an odd-sized GPT-2 (vocabulary 257,
// 33 positions, chunks of 7, so the last chunk is 5) the chunked loss is the whole-sequence loss
// bit for bit, in f32 and in f64, with one sequence and with two carrying ignored targets, and
// both are the f64 model's loss to within the f32 forward's rounding. With TESSEL_DUMP_DIR set,
// the chunked evaluation dumps what the whole forward dumps (bit for bit but for the logits' f32
// rounding).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "common/scratch_dir.h"
#include "common/tolerance.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/io/safetensors.h"
#include "tessel/models/gpt2/gpt2.h"

namespace tessel::models {
namespace {

constexpr int64_t kVocab = 257, kT = 33, kChunk = 7;

GPT2Config odd_config() {
  GPT2Config c;
  c.vocab_size = kVocab;
  c.n_positions = kT;
  c.n_embd = 15;
  c.n_head = 3;
  c.n_layer = 2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

// ids and next-token targets of `batch` sequences of kT tokens, spread over the vocabulary;
// `ignored` targets of the last sequence are -100.
std::pair<Tensor, Tensor> odd_batch(int64_t batch, int64_t ignored = 0) {
  std::vector<int64_t> ids, targets;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t <= kT; ++t) {
      const int64_t id = (b * 101 + t * 37 + t * t * 11) % kVocab;
      if (t < kT) ids.push_back(id);
      if (t > 0) targets.push_back(b == batch - 1 && t <= ignored ? -100 : id);
    }
  }
  return {from_data(ids, Shape{batch, kT}), from_data(targets, Shape{batch, kT})};
}

std::shared_ptr<GPT2> odd_model(DType dtype) {
  Generator g(15);
  auto model = GPT2::random(odd_config(), g);
  model->to(dtype);  // the same initial values, held in `dtype`
  model->eval();
  return model;
}

TEST(EvalLoss, ChunksOfSevenEqualTheWholeSequenceBitForBit) {
  autograd::NoGradGuard no_grad;
  for (DType dtype : {DType::F32, DType::F64}) {
    auto model = odd_model(dtype);
    for (int64_t batch : {1, 2}) {
      const auto [ids, targets] = odd_batch(batch, batch == 2 ? 9 : 0);
      const double whole = model->loss(ids, targets).item();
      EXPECT_EQ(model->eval_loss(ids, targets, kChunk).item(), whole)
          << dtype_name(dtype) << " batch " << batch;
      // One chunk (a bound beyond T) and the byte-bound default give the same.
      EXPECT_EQ(model->eval_loss(ids, targets, 1000).item(), whole);
      EXPECT_EQ(model->eval_loss(ids, targets).item(), whole);
      EXPECT_EQ(model->eval_loss(ids, targets, 1).item(), whole);
    }
  }
}

TEST(EvalLoss, MatchesTheFloat64Model) {
  autograd::NoGradGuard no_grad;
  const auto [ids, targets] = odd_batch(2, 9);
  const double want = odd_model(DType::F64)->eval_loss(ids, targets, kChunk).item();
  const double got = odd_model(DType::F32)->eval_loss(ids, targets, kChunk).item();
  // The f32 forward against f64 (tests/common/tolerance.h): the longest reduction is the MLP's
  // 4 x 15 inputs, through 2 blocks of 4 stages each plus the head's norm, projection and
  // softmax; a wrong target or a chunk scored twice is off by O(1 / 33) of the loss or more.
  EXPECT_NEAR(got, want,
              test::elementwise_tolerance(DType::F32, 4 * 15, 11, std::max(1.0, std::abs(want))));
  EXPECT_GT(std::abs(want), 1.0);  // a random model over 257 tokens: about log(257)
}

TEST(EvalLoss, RefusesToRecordGradients) {
  auto model = odd_model(DType::F32);
  const auto [ids, targets] = odd_batch(1);
  autograd::GradModeGuard grad(true);
  try {
    model->eval_loss(ids, targets, kChunk);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inference only"), std::string::npos) << e.what();
  }
}

TEST(EvalLoss, DumpsWhatTheWholeForwardDumps) {
  namespace fs = std::filesystem;
  autograd::NoGradGuard no_grad;
  const fs::path dir = test::scratch_path("tessel_eval_loss_dump", /*create=*/false);
  auto model = odd_model(DType::F32);
  const auto [ids, targets] = odd_batch(2, 9);  // two rows: each chunk's rows are copies
  ::setenv("TESSEL_DUMP_DIR", dir.c_str(), 1);
  model->forward(ids);                     // activations-0000
  model->eval_loss(ids, targets, kChunk);  // activations-0001: chunks of 7, 7, 7, 7, 5
  ::unsetenv("TESSEL_DUMP_DIR");
  model->eval_loss(ids, targets, kChunk);  // not dumped: the variable is unset
  auto whole = io::SafetensorsFile::open((dir / "activations-0000.safetensors").string());
  auto chunked = io::SafetensorsFile::open((dir / "activations-0001.safetensors").string());
  EXPECT_FALSE(fs::exists(dir / "activations-0002.safetensors"));
  EXPECT_EQ(chunked.names(), whole.names());
  for (const char* name : {"h.1", "ln_f", "logits"}) EXPECT_TRUE(chunked.contains(name)) << name;
  EXPECT_EQ(chunked.entry("logits").shape, (Shape{2, kT, kVocab}));
  for (const std::string& name : whole.names()) {
    if (!chunked.contains(name)) continue;
    EXPECT_EQ(chunked.entry(name).shape, whole.entry(name).shape) << name;
    const std::vector<float> got = chunked.load(name).to_vector<float>();
    const std::vector<float> want = whole.load(name).to_vector<float>();
    if (name != "logits") {
      // The blocks run once either way, and ln_f is per token: bit for bit.
      EXPECT_EQ(got, want) << name;
      continue;
    }
    // The head's product over rows of 5 or 7 tokens instead of 66 may block its sums otherwise
    // (15-term dot products); a logit from the wrong position or chunk is off by O(1).
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
      diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      norm += double(want[i]) * want[i];
    }
    EXPECT_LE(std::sqrt(diff / norm), test::reorder_tolerance(DType::F32, 15, 1)) << name;
  }
  fs::remove_all(dir);
}

TEST(EvalLoss, ChunkPositionsFollowTheByteBound) {
  // 32 MiB of f32 logits: GPT-2's 50257 columns give 166 positions for one sequence, 20 for 8.
  EXPECT_EQ(loss_chunk_positions(1, 50257), 166);
  EXPECT_EQ(loss_chunk_positions(8, 50257), 20);
  EXPECT_EQ(loss_chunk_positions(1, int64_t(1) << 30), 1);  // never fewer than one position
}

}  // namespace
}  // namespace tessel::models
