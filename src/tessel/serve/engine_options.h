// SPDX-License-Identifier: Apache-2.0
// The serving engine's settings (docs/SERVING.md gives the flags of `tessel serve` that set them),
// shared by the engine on rank 0 and, under tensor parallelism, the ranks that follow it.
#pragma once

#include <cstdint>

namespace tessel::serve {

struct EngineOptions {
  int64_t max_batch_tokens = 512;  // tokens per step (decode tokens + prompt chunks)
  int64_t max_seqs = 64;           // sequences running at once
  // KV pool size in bytes; 0: kDefaultKvFraction of the memory available when the engine starts,
  // capped by what max_seqs full-length sequences could use.
  int64_t kv_cache_bytes = 0;
  int64_t block_size = 16;  // tokens per KV block
  // The longest prompt + output (0: the model's max_positions).
  int64_t max_model_len = 0;
  bool prefix_caching = true;
  int64_t max_queue = 256;  // waiting requests before submit answers kQueueFull
  int64_t max_n = 16;       // choices per request
  // Batch-invariant kernels (docs/SERVING.md): a request's tokens and logprobs do not depend on
  // the rest of the batch. Off by default: measured 0.84x throughput at 16 and 64 concurrent
  // GPT-2 124M streams; products of up to 48 rows take the same kernel in both modes.
  bool deterministic = false;
  // Groups of requests with one step each in flight (serve/step_groups.h; `serve --pp-groups`):
  // above 1 the model must start and finish its forward apart (rank 0 of a pipeline).
  int64_t step_groups = 1;
};

}  // namespace tessel::serve
