// SPDX-License-Identifier: Apache-2.0
// The serving engine's settings (docs/SERVING.md gives the flags of `tessel serve` that set them),
// shared by the engine on rank 0 and, under tensor parallelism, the ranks that follow it.
#pragma once

#include <cstdint>
#include <string>

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
  // The KV pool's element type (`serve --kv-cache-dtype`): "auto" (the model's own), "f32",
  // "bf16" or "f16". A 16-bit pool under an f32 model halves the bytes attention reads a step;
  // keys and values are rounded as they are stored, so tokens may differ from the model's own.
  std::string kv_cache_dtype = "auto";
  // Batch-invariant kernels (docs/SERVING.md): a request's tokens and logprobs do not depend on
  // the rest of the batch. Off by default: measured 0.82x throughput at 16 concurrent GPT-2 124M
  // streams (the default mode runs products of 8-48 rows on a faster kernel).
  bool deterministic = false;
  // Groups of requests with one step each in flight (serve/step_groups.h; `serve --pp-groups`):
  // above 1 the model must start and finish its forward apart (rank 0 of a pipeline).
  int64_t step_groups = 1;
};

}  // namespace tessel::serve
