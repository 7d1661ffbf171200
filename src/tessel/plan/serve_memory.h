// SPDX-License-Identifier: Apache-2.0
// Serving memory above the weights: the KV cache and the activations and workspace one rank's
// inference forward allocates (logits of the sampled rows, the block's intermediates, the
// batch's gathered keys and values, tensor parallelism's gathered logits). For a tessel model it
// is traced: the model is built on the meta device (tensor-parallel ranks split by the runtime's
// own plan and pipeline ranks wrapped as the runtime's stage, both supplied from above), and a
// generation's prefill and its last decode step (the longest context) run shape-only through the
// real forward, the meta allocator's peak counting every tensor the host allocator would
// (tensor/meta_allocator.h). For a geometry without a tessel model (the PaLM sizes) a per-layer
// formula of the same tensors is used; it equals the trace where both apply.
// docs/PLANNER.md, "Serving plans", "Memory per rank".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "tessel/models/causal_lm.h"

namespace tessel::plan {

struct ServeShape;

// What a generation of `batch` sequences holds above the loaded model, in bytes.
struct ServeMemory {
  double kv_bytes = 0;       // the cache: batch x capacity tokens of the rank's layers and heads
  double prefill_bytes = 0;  // the prefill's peak above the weights and the cache
  double decode_bytes = 0;   // the last decode step's, the previous step's logits still held
  double workspace() const { return prefill_bytes > decode_bytes ? prefill_bytes : decode_bytes; }
  double peak() const { return kv_bytes + workspace(); }
};

// A rank's model, from a layer above the planner (cli/): `transform` splits the model built on
// meta as the runtime's tensor parallelism does; `full_logits` gathers the rank's vocabulary
// columns as the generation loop does before sampling; `stage` wraps it as the runtime's pipeline
// stage of this rank (its blocks, its cache's layers, the hidden states and logits passed over a
// shape-only communicator). All empty for one rank.
struct ServeRankModel {
  using FullLogits = std::function<Tensor(const Tensor&)>;
  std::function<void(models::CausalLM&)> transform;
  FullLogits full_logits;
  std::function<std::shared_ptr<models::CausalLM>(std::shared_ptr<models::CausalLM>)> stage;
};

// `tessel generate`'s loop (models/generation.cpp) on meta: the cache for `capacity` tokens of
// `batch` sequences, a prefill of `prompt` tokens (logits of the last position only) and a decode
// step at position capacity - 2 (the last one a generation of capacity - prompt tokens runs).
ServeMemory trace_serve_memory(const models::ModelConfig& config, int64_t batch, int64_t prompt,
                               int64_t capacity, const ServeRankModel& rank = {});

// The same terms by formula, for a geometry without a model: per rank of `tp` (heads, MLP and
// vocabulary split tp ways), `elem` bytes per activation element, `kv_elem` per cache element.
ServeMemory serve_memory_formula(const ServeShape& shape, int tp, int64_t batch, int64_t prompt,
                                 int64_t capacity, int elem, int kv_elem);

// Traced serving memory of the ranks of pipeline stage `stage` of `pp`, each stage split over
// `tp` ranks (a layer above supplies the runtime's splits).
using ServeMemoryFn = std::function<ServeMemory(int tp, int pp, int stage, int64_t batch,
                                                int64_t prompt, int64_t capacity)>;

}  // namespace tessel::plan
