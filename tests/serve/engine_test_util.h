// SPDX-License-Identifier: Apache-2.0
// What the engine tests share: tiny GPT-2 and LLaMA configurations, deterministic prompts, and a
// sink that collects every delta of every request and waits for their ends.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/serve/engine.h"

namespace tessel::serve::engine_testing {

constexpr int64_t kVocab = 263;  // the test tokenizer's 262 ids and one padded row

// LAYERS blocks of width 24, dropout off.
inline models::GPT2Config tiny_gpt2_config(int64_t layers = 2) {
  models::GPT2Config c;
  c.vocab_size = kVocab;
  c.n_positions = 97;
  c.n_embd = 24;
  c.n_head = 3;
  c.n_layer = layers;
  c.initializer_range = 0.2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

// Two blocks of width 24, 6 heads over 2 KV heads.
inline models::LlamaConfig tiny_llama_config() {
  models::LlamaConfig c;
  c.vocab_size = kVocab;
  c.hidden = 24;
  c.intermediate_size = 37;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 97;
  c.initializer_range = 0.2;
  c.bos_token_id = std::nullopt;
  c.eos_token_ids = {};
  return c;
}

// N token ids below 256, a pure function of SEED.
inline std::vector<int64_t> prompt_of(int64_t n, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[size_t(i)] = int64_t(uniform_at(seed, 0, uint64_t(i)) * 256.0f) % 256;
  return ids;
}

// Collects every delta of every request and waits for their ends.
class Collector {
 public:
  DeltaSink sink(const std::string& id) {
    return [this, id](const Delta& d) {
      std::lock_guard<std::mutex> lock(mu_);
      deltas_[id].push_back(d);
      if (d.finish != FinishReason::kNone) ++finished_[id];
      done_.notify_all();
    };
  }
  void wait(const std::string& id, int64_t choices = 1) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(
        done_.wait_for(lock, std::chrono::seconds(120), [&] { return finished_[id] >= choices; }))
        << "request " << id << " did not finish";
  }
  std::vector<Delta> of(const std::string& id, int64_t choice = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Delta> out;
    for (const Delta& d : deltas_[id])
      if (d.index == choice) out.push_back(d);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::map<std::string, std::vector<Delta>> deltas_;
  std::map<std::string, int64_t> finished_;
};

struct Output {
  std::vector<int64_t> tokens;
  std::vector<double> logprobs;
  std::string text;
  FinishReason finish = FinishReason::kNone;
};

inline Output output_of(const std::vector<Delta>& deltas) {
  Output o;
  for (const Delta& d : deltas) {
    o.tokens.insert(o.tokens.end(), d.tokens.begin(), d.tokens.end());
    for (const TokenLogprob& l : d.logprobs) {
      o.logprobs.push_back(l.logprob);
      for (const auto& [id, lp] : l.top) o.logprobs.push_back(lp + double(id));
    }
    o.text += d.text;
    if (d.finish != FinishReason::kNone) o.finish = d.finish;
  }
  return o;
}

}  // namespace tessel::serve::engine_testing
