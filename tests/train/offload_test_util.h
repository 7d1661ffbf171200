// SPDX-License-Identifier: Apache-2.0
// The offloaded runs' fixtures: a GPT-2 of odd sizes with gradient accumulation and clipping,
// budgets counted in chunks, and hooks that collect the step records and printed lines.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "tessel/train/trainer.h"
#include "trainer_test_util.h"

namespace tessel::train::test {

// Odd sizes: C = 33 over 3 heads, 3 blocks, vocabulary 37, B = 3, T = 13, two micro-batches.
inline TrainConfig odd_config(const fs::path& dir, const std::string& run, int64_t steps = 20) {
  TrainConfig c = base_config(dir, 37, steps);
  models::GPT2Config m = tiny_model(37);
  m.n_embd = 33;
  m.n_head = 3;
  m.n_layer = 3;
  std::ofstream(dir / "config.json") << m.to_json();
  c.checkpoint.dir = (dir / run).string();
  c.train.micro_batch = 3;
  c.train.seq_len = 13;
  c.train.grad_accum = 2;
  c.optim.grad_clip = 0.05;  // clipping on most steps: the scaling pass runs in the chunks
  return c;
}

inline constexpr size_t kChunk = 20480;  // the largest tensor (33 x 132 f32) fits one

inline TrainConfig offloaded(TrainConfig c, size_t device_chunks, size_t host_chunks,
                             const std::string& nvme) {
  c.memory.chunk_size = std::to_string(kChunk);
  c.memory.device_budget = std::to_string(device_chunks * kChunk);
  c.memory.host_budget = std::to_string(host_chunks * kChunk);
  c.memory.nvme_dir = nvme;
  c.memory.prefetch = 4;
  return c;
}

inline TrainerHooks collect(std::vector<StepRecord>* steps,
                            std::vector<std::string>* lines = nullptr) {
  TrainerHooks h;
  h.print = [lines](const std::string& l) {
    if (lines) lines->push_back(l);
  };
  h.on_step = [steps](const StepRecord& r) {
    if (steps) steps->push_back(r);
  };
  return h;
}

// The smallest device tier the layout allows (from a roomy first build).
inline size_t device_chunks_needed(const TrainConfig& c) {
  Trainer probe(offloaded(c, 64, 64, ""), "", collect(nullptr));
  return size_t(probe.offload()->device_working_set());
}

}  // namespace tessel::train::test
