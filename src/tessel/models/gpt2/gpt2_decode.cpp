// SPDX-License-Identifier: Apache-2.0
// GPT-2 incremental decoding with a key/value cache: the new tokens go through every block, their
// keys and values join the cache, and their queries attend to all cached positions (the causal
// mask is offset by the number of cached tokens).
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
  return KVCache(config_.n_layer, batch, capacity, heads, d, wte->output_dtype());
}

Tensor GPT2::forward_step(const Tensor& ids, KVCache& cache, bool last_only) {
  TESSEL_CHECK(ids.ndim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
               "GPT2.forward_step: ids ", ids.shape(), " ", dtype_name(ids.dtype()),
               " expected i32/i64 [B, T]");
  const int64_t b = ids.size(0), t = ids.size(1), start = cache.length();
  const int64_t d = config_.n_embd / config_.n_head;
  // This rank's heads under tensor parallelism (c_attn split per head), else all of them.
  const int64_t heads =
      blocks.empty() ? config_.n_head : blocks[0]->attn->c_attn->weight.size(0) / (3 * d);
  const int64_t c = heads * d;
  TESSEL_CHECK(cache.n_layer() == config_.n_layer && cache.batch() == b &&
                   cache.n_head() == heads && cache.head_dim() == d,
               "GPT2.forward_step: cache of ", cache.n_layer(), " layers, batch ", cache.batch(),
               ", ", cache.n_head(), " heads of ", cache.head_dim(), " expected ", config_.n_layer,
               " layers, batch ", b, ", ", heads, " heads of ", d);
  TESSEL_CHECK(t >= 1 && start + t <= std::min(cache.capacity(), config_.n_positions),
               "GPT2.forward_step: ", t, " new tokens after ", start, " cached exceed the ",
               std::min(cache.capacity(), config_.n_positions), " positions available");
  autograd::NoGradGuard no_grad;
  Tensor positions = arange(double(start), double(start + t), 1.0, DType::I64);
  Tensor x = ops::add(wte->forward(ids), wpe->forward(positions));
  for (size_t l = 0; l < blocks.size(); ++l) {
    models::GPT2Block& block = *blocks[l];
    models::GPT2Attention& attn = *block.attn;
    std::vector<Tensor> qkv =
        ops::split(attn.c_attn->forward(block.ln_1->forward(x)), {c, c, c}, -1);
    Tensor q = qkv[0].reshape({b, t, heads, d});
    auto [k, v] = cache.append(int64_t(l), qkv[1].reshape({b, t, heads, d}),
                               qkv[2].reshape({b, t, heads, d}));
    // Causal with Tq < Tk: query i (position start + i) sees keys 0 .. start + i.
    Tensor y = ops::attention(q, k, v, /*causal=*/true).reshape({b, t, c});
    x = ops::add(x, attn.c_proj->forward(y));
    models::GPT2MLP& mlp = *block.mlp;
    x = ops::add(x, mlp.c_proj->forward(ops::gelu(mlp.c_fc->forward(block.ln_2->forward(x)))));
  }
  cache.advance(t);
  if (last_only && t > 1) x = x.slice(1, t - 1, t);
  return lm_logits(ln_f->forward(x));
}

}  // namespace tessel::models
