// SPDX-License-Identifier: Apache-2.0
// GPT-2 cached decoding: the new tokens go through every block at the positions the cache gives
// them; the cache stores their keys and values and attends their queries over what each may see.
#include <algorithm>
#include <string>

#include "tessel/autograd/grad_mode.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/ops/ops.h"

namespace tessel::models {

KVCache GPT2::make_cache(int64_t batch, int64_t capacity) const {
  if (capacity == 0) capacity = config_.n_positions;
  TESSEL_CHECK(capacity > 0 && capacity <= config_.n_positions, "GPT2.make_cache: capacity ",
               capacity, " outside [1, n_positions = ", config_.n_positions, "]");
  // Heads as c_attn holds them: all of them, or this rank's under tensor parallelism.
  const int64_t d = config_.n_embd / config_.n_head;
  const int64_t heads =
      blocks.empty() ? config_.n_head : blocks[0]->attn->c_attn->weight.size(0) / (3 * d);
  return KVCache(config_.n_layer, batch, capacity, heads, d, wte->output_dtype(), device());
}

Tensor GPT2::forward_cached(const Tensor& ids, DecodeCache& cache, const Tensor& rows) {
  TESSEL_CHECK(ids.ndim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
               "GPT2.forward_cached: ids ", ids.shape(), " ", dtype_name(ids.dtype()),
               " expected i32/i64 [B, T]");
  TESSEL_CHECK(cache.n_layer() == config_.n_layer, "GPT2.forward_cached: cache of ",
               cache.n_layer(), " layers expected ", config_.n_layer);
  return cached_head(forward_cached_layers(0, config_.n_layer, ids, cache), rows);
}

Tensor GPT2::forward_cached_layers(int64_t first, int64_t last, const Tensor& input,
                                   DecodeCache& cache) {
  const int64_t layers = config_.n_layer;
  check_stage_input("GPT2.forward_cached_layers", first, last, layers, input, config_.n_embd);
  const bool embeds = first == 0;
  const int64_t b = input.size(0), t = input.size(1);
  const int64_t d = config_.n_embd / config_.n_head;
  // This rank's heads under tensor parallelism (c_attn split per head), else all of them.
  const int64_t heads =
      blocks.empty() ? config_.n_head : blocks[0]->attn->c_attn->weight.size(0) / (3 * d);
  const int64_t c = heads * d;
  TESSEL_CHECK(cache.kv_heads() == heads && cache.head_dim() == d,
               "GPT2.forward_cached_layers: cache of ", cache.kv_heads(), " heads of ",
               cache.head_dim(), " expected ", heads, " heads of ", d);
  const int64_t end = cache.position_end(b, t);
  TESSEL_CHECK(t >= 1 && end <= config_.n_positions, "GPT2.forward_cached: ", t,
               " new tokens reach position ", end, ", past n_positions = ", config_.n_positions);
  autograd::NoGradGuard no_grad;
  Tensor x = embeds ? ops::add(wte->forward(input), wpe->forward(cache.positions(b, t))) : input;
  for (int64_t l = first; l < last; ++l) {
    models::GPT2Block& block = *blocks[size_t(l)];
    models::GPT2Attention& attn = *block.attn;
    std::vector<Tensor> qkv =
        ops::split(attn.c_attn->forward(block.ln_1->forward(x)), {c, c, c}, -1);
    Tensor y = cache.attend(stage_cache_layer(cache, first, last, layers, l),
                            qkv[0].reshape({b, t, heads, d}), qkv[1].reshape({b, t, heads, d}),
                            qkv[2].reshape({b, t, heads, d}), /*window=*/0);
    x = ops::add(x, attn.c_proj->forward(y.reshape({b, t, c})));
    if (block.moe) {
      x = ops::add(x, block.feed_forward(block.ln_2->forward(x)));
      continue;
    }
    models::GPT2MLP& mlp = *block.mlp;
    x = ops::add(x, mlp.c_proj->forward(ops::gelu(mlp.c_fc->forward(block.ln_2->forward(x)))));
  }
  return x;
}

Tensor GPT2::cached_head(const Tensor& hidden, const Tensor& rows) {
  autograd::NoGradGuard no_grad;
  return lm_logits(ln_f->forward(select_tokens(hidden, rows)));
}

}  // namespace tessel::models
