// SPDX-License-Identifier: Apache-2.0
// LLaMA cached decoding: the new tokens run through every layer at the positions the cache gives
// them; their rotated keys and values go to the cache (KV heads only: a grouped-query model caches
// num_key_value_heads, not num_attention_heads), which attends their queries over the positions
// each may see (causal, within the sliding window).
#include <algorithm>

#include "tessel/autograd/grad_mode.h"
#include "tessel/models/llama/llama.h"
#include "tessel/ops/ops.h"

namespace tessel::models {

KVCache Llama::make_cache(int64_t batch, int64_t capacity) const {
  const int64_t limit = config_.max_positions();
  if (capacity == 0) capacity = limit;
  TESSEL_CHECK(capacity > 0 && capacity <= limit, "Llama.make_cache: capacity ", capacity,
               " outside [1, max_positions = ", limit, "]");
  const int64_t kv_heads = decoder_layers.empty() ? config_.num_key_value_heads
                                                  : decoder_layers[0]->self_attn->local_kv_heads();
  return KVCache(config_.num_hidden_layers, batch, capacity, kv_heads, config_.head_dim,
                 embed_tokens->output_dtype(), device());
}

Tensor Llama::forward_cached(const Tensor& ids, DecodeCache& cache, const Tensor& rows) {
  TESSEL_CHECK(ids.ndim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
               "Llama.forward_cached: ids ", ids.shape(), " ", dtype_name(ids.dtype()),
               " expected i32/i64 [B, T]");
  TESSEL_CHECK(cache.n_layer() == config_.num_hidden_layers, "Llama.forward_cached: cache of ",
               cache.n_layer(), " layers expected ", config_.num_hidden_layers);
  return cached_head(forward_cached_layers(0, config_.num_hidden_layers, ids, cache), rows);
}

Tensor Llama::forward_cached_layers(int64_t first, int64_t last, const Tensor& input,
                                    DecodeCache& cache) {
  const int64_t layers = config_.num_hidden_layers;
  check_stage_input("Llama.forward_cached_layers", first, last, layers, input,
                    config_.hidden_size());
  const bool embeds = first == 0;
  const int64_t b = input.size(0), t = input.size(1);
  const int64_t d = config_.head_dim;
  const int64_t kv_heads = decoder_layers.empty() ? config_.num_key_value_heads
                                                  : decoder_layers[0]->self_attn->local_kv_heads();
  TESSEL_CHECK(cache.kv_heads() == kv_heads && cache.head_dim() == d,
               "Llama.forward_cached_layers: cache of ", cache.kv_heads(), " heads of ",
               cache.head_dim(), " expected ", kv_heads, " KV heads of ", d);
  const int64_t end = cache.position_end(b, t);
  TESSEL_CHECK(t >= 1 && end <= config_.max_positions(), "Llama.forward_cached: ", t,
               " new tokens reach position ", end,
               ", past max_positions = ", config_.max_positions());
  autograd::NoGradGuard no_grad;
  const Tensor positions = cache.positions(b, t);
  Tensor x = embeds ? embed_tokens->forward(input) : input;
  for (int64_t l = first; l < last; ++l) {
    LlamaDecoderLayer& layer = *decoder_layers[size_t(l)];
    LlamaAttention& attn = *layer.self_attn;
    LlamaAttention::Projected p = attn.project(layer.input_layernorm->forward(x), positions, end);
    Tensor y =
        cache.attend(stage_cache_layer(cache, first, last, layers, l), p.q, p.k, p.v, attn.window())
            .reshape({b, t, p.q.size(2) * d});
    x = ops::add(x, attn.o_proj->forward(y));
    x = ops::add(x, layer.feed_forward(layer.post_attention_layernorm->forward(x)));
  }
  return x;
}

Tensor Llama::cached_head(const Tensor& hidden, const Tensor& rows) {
  autograd::NoGradGuard no_grad;
  return logits(norm->forward(select_tokens(hidden, rows)));
}

}  // namespace tessel::models
