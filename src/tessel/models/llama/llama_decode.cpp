// SPDX-License-Identifier: Apache-2.0
// LLaMA incremental decoding with a key/value cache: the new tokens run through every layer at
// positions [cache.length(), cache.length() + T), their rotated keys and values join the cache
// (KV heads only: a grouped-query model caches num_key_value_heads, not num_attention_heads), and
// their queries attend to the cached positions they may see (causal, within the sliding window).
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
                 embed_tokens->output_dtype());
}

Tensor Llama::forward_step(const Tensor& ids, KVCache& cache, bool last_only) {
  TESSEL_CHECK(ids.ndim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
               "Llama.forward_step: ids ", ids.shape(), " ", dtype_name(ids.dtype()),
               " expected i32/i64 [B, T]");
  const int64_t b = ids.size(0), t = ids.size(1), start = cache.length();
  const int64_t d = config_.head_dim;
  const int64_t kv_heads = decoder_layers.empty() ? config_.num_key_value_heads
                                                  : decoder_layers[0]->self_attn->local_kv_heads();
  TESSEL_CHECK(cache.n_layer() == config_.num_hidden_layers && cache.batch() == b &&
                   cache.n_head() == kv_heads && cache.head_dim() == d,
               "Llama.forward_step: cache of ", cache.n_layer(), " layers, batch ", cache.batch(),
               ", ", cache.n_head(), " heads of ", cache.head_dim(), " expected ",
               config_.num_hidden_layers, " layers, batch ", b, ", ", kv_heads, " KV heads of ", d);
  const int64_t limit = std::min(cache.capacity(), config_.max_positions());
  TESSEL_CHECK(t >= 1 && start + t <= limit, "Llama.forward_step: ", t, " new tokens after ", start,
               " cached exceed the ", limit, " positions available");
  autograd::NoGradGuard no_grad;
  Tensor x = embed_tokens->forward(ids);
  for (size_t l = 0; l < decoder_layers.size(); ++l) {
    LlamaDecoderLayer& layer = *decoder_layers[l];
    LlamaAttention& attn = *layer.self_attn;
    LlamaAttention::Projected p = attn.project(layer.input_layernorm->forward(x), start);
    auto [k, v] = cache.append(int64_t(l), p.k, p.v);
    // Tq < Tk: query i sits at position start + i (causal and windowed from there).
    Tensor y = attn.attend(p.q, k, v).reshape({b, t, p.q.size(2) * d});
    x = ops::add(x, attn.o_proj->forward(y));
    x = ops::add(x, layer.mlp->forward(layer.post_attention_layernorm->forward(x)));
  }
  cache.advance(t);
  if (last_only && t > 1) x = x.slice(1, t - 1, t);
  return logits(norm->forward(x));
}

}  // namespace tessel::models
