// SPDX-License-Identifier: Apache-2.0
// The memory one step of the serving engine takes above the loaded model and its paged KV pool
// (PagedAttention, Kwon et al. 2023): the step's packed tensors (ids, positions, slots, block
// tables, sequence lengths and starts, sampled rows), the model's forward over the ragged batch
// with its queries attending through the block tables, and the sampled rows' logits in f32. It is
// traced: the engine's own PagedStep and the model's forward_cached run on the meta device, whose
// allocator counts every tensor the host allocator would; the engine measures the same peak around
// each step (EngineStats::step_peak_bytes, `engine_step_peak_bytes` in /metrics).
// docs/PLANNER.md, "Serving plans", "The engine's step".
#pragma once

#include <cstdint>
#include <functional>

#include "tessel/models/causal_lm.h"
#include "tessel/serve/engine_options.h"

namespace tessel::serve {

// A tensor-parallel rank 0's model (empty for one rank): `transform` splits the model built on
// meta as the runtime does, `gather_logits` gathers the sampled rows' vocabulary as the step
// mirror does.
struct StepRankModel {
  std::function<void(models::CausalLM&)> transform;
  std::function<Tensor(const Tensor&)> gather_logits;
};

// Bytes above the model and the pool of a step of `tokens` tokens packed from `seqs` sequences,
// each one sampled, the longest holding `context` keys after the step, with the engine's
// `options` (its block size).
int64_t trace_step_memory(const models::ModelConfig& config, const EngineOptions& options,
                          int64_t tokens, int64_t seqs, int64_t context,
                          const StepRankModel& rank = {});

}  // namespace tessel::serve
