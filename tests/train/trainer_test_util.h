// SPDX-License-Identifier: Apache-2.0
// Helpers for the trainer tests: a synthetic token dataset (shards + manifest, as `tessel data
// prepare` writes them) drawn from a low-entropy process, a tiny GPT-2 config, and a quiet base
// configuration in a per-process scratch directory.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "tessel/core/rng.h"
#include "tessel/io/token_shards.h"
#include "tessel/models/gpt2/gpt2_config.h"
#include "tessel/train/config.h"

namespace tessel::train::test {

namespace fs = std::filesystem;

inline fs::path scratch(const std::string& name) {
  return tessel::test::scratch_path("tessel_train_" + name);
}

// Tokens of a Markov chain over `vocab` ids: the next id is a fixed permutation of the previous
// one (7 * prev + 3 mod vocab), except that one step in `noise` is a uniform draw. Low
// conditional entropy, near-uniform unigram distribution: a model that learns the rule gets far
// below the unigram entropy.
inline std::vector<int32_t> markov_tokens(int64_t n, int32_t vocab, uint64_t seed, int noise = 8) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  int32_t prev = 1;
  for (int64_t i = 0; i < n; ++i) {
    int32_t next = (7 * prev + 3) % vocab;
    if (uniform_at(seed, 0, uint64_t(i)) < 1.0f / float(noise)) {
      next = int32_t(uniform_at(seed, 1, uint64_t(i)) * float(vocab)) % vocab;
    }
    out[size_t(i)] = next;
    prev = next;
  }
  return out;
}

inline double unigram_entropy(const std::vector<int32_t>& tokens) {
  std::map<int32_t, int64_t> counts;
  for (int32_t t : tokens) ++counts[t];
  double h = 0;
  for (const auto& [id, c] : counts) {
    const double p = double(c) / double(tokens.size());
    h -= p * std::log(p);
  }
  return h;
}

// A dataset directory with a train and a val split (one shard each) and its manifest.
inline void write_dataset(const fs::path& dir, const std::vector<int32_t>& train,
                          const std::vector<int32_t>& val, int64_t vocab) {
  fs::create_directories(dir);
  nlohmann::json splits;
  for (const auto& [name, tokens] : {std::pair{"train", &train}, std::pair{"val", &val}}) {
    const std::string file = std::string(name) + "_000000.bin";
    const io::TokenShardInfo info = io::write_token_shard((dir / file).string(), *tokens, vocab);
    std::ostringstream hex;
    hex << std::hex << info.checksum;
    splits[name] = {
        {"documents", 1},
        {"tokens", info.tokens},
        {"shards", {{{"file", file}, {"tokens", info.tokens}, {"checksum", hex.str()}}}}};
  }
  const nlohmann::json manifest{
      {"format", "tessel-token-dataset"},
      {"version", 1},
      {"tokenizer", {{"path", ""}, {"vocab_size", vocab}, {"eot_id", nullptr}}},
      {"dtype", "uint16"},
      {"splits", splits}};
  std::ofstream(dir / "manifest.json") << manifest.dump(2);
}

inline models::GPT2Config tiny_model(int64_t vocab) {
  models::GPT2Config c;
  c.vocab_size = vocab;
  c.n_positions = 32;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

// tiny_model as a GPT-2-MoE: both blocks MoE, 4 experts of width 13, top-2, capacity factor 1
// (so the capacity drops pairs).
inline models::GPT2Config tiny_moe_model(int64_t vocab) {
  models::GPT2Config m = tiny_model(vocab);
  m.n_inner = 13;
  m.moe.num_experts = 4;
  m.moe.top_k = 2;
  m.moe.moe_every = 1;
  m.moe.capacity_factor = 1.0;
  return m;
}

// Dataset + model config in `dir`, and a configuration that trains on them quietly.
inline TrainConfig base_config(const fs::path& dir, int64_t vocab = 37, int64_t steps = 20) {
  const auto train = markov_tokens(20011, int32_t(vocab), 11);
  const auto val = markov_tokens(2003, int32_t(vocab), 12);
  write_dataset(dir / "data", train, val, vocab);
  std::ofstream(dir / "config.json") << tiny_model(vocab).to_json();
  TrainConfig c;
  c.model.config = (dir / "config.json").string();
  c.data.dir = (dir / "data").string();
  c.checkpoint.dir = (dir / "run").string();
  c.checkpoint.interval = 0;
  c.train.steps = steps;
  c.train.micro_batch = 4;
  c.train.seq_len = 16;
  c.optim.lr = 3e-3;
  c.optim.warmup_steps = 2;
  c.eval.interval = 0;
  c.eval.batches = 4;
  c.log.interval = 1000;
  c.sample.tokens = 0;
  c.machine.peak_gflops = 100;  // no measurement in tests
  return c;
}

}  // namespace tessel::train::test
