// SPDX-License-Identifier: Apache-2.0
// Serving memory above the weights, traced on meta or by formula (plan/serve_memory.h).
#include "tessel/plan/serve_memory.h"

#include <algorithm>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/plan/serve_cost.h"
#include "tessel/tensor/default_device.h"
#include "tessel/tensor/meta_allocator.h"

namespace tessel::plan {

ServeMemory trace_serve_memory(const models::ModelConfig& config, int64_t batch, int64_t prompt,
                               int64_t capacity, const ServeRankModel& rank) {
  TESSEL_CHECK(batch >= 1 && prompt >= 1 && capacity > prompt, "serving memory: batch ", batch,
               ", prompt ", prompt, ", capacity ", capacity,
               " (a prompt and at least one generated token)");
  DefaultDeviceScope meta(Device::meta());
  autograd::NoGradGuard no_grad;
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (rank.transform) rank.transform(*model);
  model->eval();
  ServeMemory m;
  MetaAllocator& a = meta_allocator();
  // What generation.cpp does, with its tensors' lifetimes: the logits of the sampled position as
  // f32 (gathered over the vocabulary first under tensor parallelism) stay held until the next
  // step's replace them.
  auto step = [&](const Tensor& ids, models::KVCache& cache, bool last_only) {
    Tensor out = model->forward_step(ids, cache, last_only);
    if (rank.full_logits) out = rank.full_logits(out);
    // One sequence's row is a view (generation.cpp); a batch's rows are copied out.
    const int64_t last = out.size(1) - 1;
    return (batch == 1 ? out.narrow(1, last, 1) : out.slice(1, last, last + 1)).to(DType::F32);
  };
  models::KVCache cache = model->make_cache(batch, capacity);
  m.kv_bytes = double(cache.nbytes());
  a.reset_peak();
  const double held = double(a.bytes_in_use());
  Tensor logits = step(empty({batch, prompt}, DType::I64), cache, true);
  m.prefill_bytes = double(a.peak_bytes()) - held;
  if (capacity - prompt < 2) return m;  // one generated token: no decode step runs
  // The last decode step attends to capacity - 1 positions: the cache holds capacity - 2 then.
  cache.advance(capacity - 2 - cache.length());
  a.reset_peak();
  Tensor next = step(empty({batch, 1}, DType::I64), cache, false);
  m.decode_bytes = double(a.peak_bytes()) - held;
  return m;
}

ServeMemory serve_memory_formula(const ServeShape& s, int tp, int64_t batch, int64_t prompt,
                                 int64_t capacity, int elem, int kv_elem) {
  // The tensors a block of the families' decode forwards holds at once (a C++ temporary lives
  // to the end of its statement, a named tensor to the end of the block): the residual x, the
  // projected queries, keys and values and the attention output y (named, so held through the MLP),
  // and at the MLP's statement its normalised input and inner activations — a plain MLP's up
  // product and activation beside its output and the new residual, a gated one's gate, activation,
  // up and product (4 x d_ff). Before that the attention's statements: the fused projection beside
  // its split copies, and for a batch above one the context's keys and values gathered from the
  // cache rows (one sequence reads a view). The head holds the last hidden rows, their
  // normalised copy and the logits: the rank's vocabulary columns and, under tp, the gathered
  // row; in decode the previous step's logits are still held. Not counted: the ids and
  // positions (8 bytes a token) and a rotary model's cos/sin tables made on first use.
  const double n = double(tp), b = double(batch), E = double(s.d_model);
  const double hd = double(s.heads * s.head_dim) / n;
  const double kvd = double((s.kv_heads + tp - 1) / tp) * double(s.head_dim);
  const double F = double(s.d_ff) / n;
  // A gated MLP (SwiGLU) multiplies with three E x d_ff matrices, a plain one with two: what is
  // left of the block's matrices after attention's q, k, v and o tells them apart.
  const double attn_params =
      double(s.d_model) * double(s.head_dim) * double(2 * s.heads + 2 * s.kv_heads);
  const bool gated = double(s.block_matrix_params) - attn_params > 2.5 * E * double(s.d_ff);
  const double qkv = hd + 2 * kvd;
  auto block = [&](double rows, double context) {
    const double gathered = batch > 1 ? 2 * b * context * kvd * double(kv_elem) / elem : 0;
    const double project = rows * (2 * E + 2 * qkv);
    const double attend = rows * (E + qkv + hd) + gathered;
    const double mlp = rows * (2 * E + qkv + hd) + rows * (gated ? 4 * F : 2 * F + 2 * E);
    return std::max({project, attend, mlp}) * elem;
  };
  const double logits = b * double(s.vocab) * (tp > 1 ? 1.0 / n + 1.0 : 1.0) * elem;
  auto head = [&](double rows) { return (rows * E + 2 * b * E) * elem + logits; };
  const double rows_prefill = b * double(prompt);
  ServeMemory m;
  m.kv_bytes = 2.0 * double(s.layers) * b * double(capacity) * kvd * kv_elem;
  m.prefill_bytes = std::max(block(rows_prefill, double(prompt)), head(rows_prefill));
  if (capacity - prompt >= 2)
    m.decode_bytes = logits + std::max(block(b, double(capacity - 1)), head(b));
  return m;
}

}  // namespace tessel::plan
