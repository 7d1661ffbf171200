// SPDX-License-Identifier: Apache-2.0
// Serving memory above the weights, traced on meta or by formula (plan/serve_memory.h).
#include "tessel/plan/serve_memory.h"

#include <algorithm>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/models/kv_cache.h"
#include "tessel/models/rotary_rows.h"
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
  if (rank.stage) model = rank.stage(model);
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
  // A rotary model's position tables grow as the generation's one-token steps reach their rows
  // (models/rotary_rows.h): the steps where they grew run here too, so the last one finds the
  // tables the generation's would.
  const int64_t limit = config.max_positions();
  for (int64_t rows = models::rotary_table_rows(0, prompt, limit);
       rows < capacity - 2 && rows < limit;
       rows = models::rotary_table_rows(rows, rows + 1, limit)) {
    cache.advance(rows - cache.length());
    logits = step(empty({batch, 1}, DType::I64), cache, false);
  }
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
  // its split copies; for a batch above one the context's keys and values copied out of the cache
  // rows (one sequence reads a view), each copy cutting the whole layer's rows into pieces
  // (Tensor::slice is a split: while the values are cut the keys' context is held), then the
  // attention's output and its softmax statistics (one stat-dtype value per query and head,
  // ops/attention.cpp) beside them; decode steps read the cache in place (`paged` below). The head
  // holds the last hidden rows, their normalised copy and the logits: the rank's vocabulary columns
  // and, under tp, the gathered row; in decode the previous step's logits are still held. Held
  // through every moment: the step's ids (8 bytes a token; the prefill's index of each sequence's
  // last row, 8 bytes a sequence), a rotary model's positions (8 bytes a token, named for the
  // layers; a learned embedding's are a temporary of the embedding's statement) and its cos/sin
  // tables, made on first use and grown by the models' rule (models/rotary_rows.h): in f64,
  // converted to the stat dtype, all four held at once in the first layer's projection of the step
  // that makes them.
  const double n = double(tp), b = double(batch), E = double(s.d_model);
  const double hd = double(s.heads * s.head_dim) / n;
  const double heads = hd / double(s.head_dim);
  const double kvd = double((s.kv_heads + tp - 1) / tp) * double(s.head_dim);
  const double F = double(s.d_ff) / n;
  const double a = elem, kv = kv_elem, stat = elem == 8 ? 8 : 4;
  // A gated MLP (SwiGLU) multiplies with three E x d_ff matrices, a plain one with two: what is
  // left of the block's matrices after attention's q, k, v and o tells them apart.
  const double attn_params =
      double(s.d_model) * double(s.head_dim) * double(2 * s.heads + 2 * s.kv_heads);
  const bool gated = double(s.block_matrix_params) - attn_params > 2.5 * E * double(s.d_ff);
  const double qkv = hd + 2 * kvd;
  // A block's moments in bytes, for `rows` tokens whose sequences' context is `context` long.
  // A step of fewer than KVCache::kPagedRows tokens a sequence reads the cache in place
  // through the paged kernel: no copies of the context and no statistics, but its block table
  // (i32 a sequence), lengths (i64 a sequence) and query starts (i64, one more).
  auto block = [&](double rows, double context) {
    const bool paged = rows < double(models::KVCache::kPagedRows) * b;
    const double project = rows * (2 * E + 2 * qkv) * a;
    const double cut =
        batch > 1 && !paged ? rows * (E + qkv) * a + b * (context + capacity) * kvd * kv : 0;
    const double gathered = batch > 1 && !paged ? 2 * b * context * kvd * kv : 0;
    const double attend = rows * (E + qkv + hd) * a +
                          (paged ? 4 * b + 8 * b + 8 * (b + 1) : rows * heads * stat + gathered);
    const double mlp = (rows * (2 * E + qkv + hd) + rows * (gated ? 4 * F : 2 * F + 2 * E)) * a;
    return std::max({project, cut, attend, mlp});
  };
  const double logits = b * double(s.vocab) * (tp > 1 ? 1.0 / n + 1.0 : 1.0) * a;
  auto head = [&](double rows) { return (rows * E + 2 * b * E) * a + logits; };
  const bool rotary = s.rotary_bytes_per_position > 0;
  auto indices = [&](double rows) { return rows * (rotary ? 16.0 : 8.0); };
  // The tables' rows: made by the prefill, then grown as decoding one token at a time reaches them.
  auto grown = [&](int64_t positions) {
    int64_t rows = models::rotary_table_rows(0, prompt, s.max_positions);
    while (rows < positions) rows = models::rotary_table_rows(rows, rows + 1, s.max_positions);
    return rows;
  };
  auto tables = [&](int64_t rows) { return double(s.rotary_bytes_per_position) * double(rows); };
  // The step that makes (or grows) them: x, its normalised copy and q, k, v beside the old
  // tables, the new ones in f64 and their conversion (none for f64).
  auto making = [&](double rows, int64_t old_rows, int64_t new_rows) {
    if (!rotary || new_rows == old_rows) return 0.0;
    return rows * (2 * E + qkv) * a + tables(old_rows) + tables(new_rows) * (stat == 8 ? 1 : 3);
  };
  const double rows_prefill = b * double(prompt);
  const int64_t first_rows = grown(prompt), before_last = grown(capacity - 2),
                last_rows = grown(capacity - 1);
  ServeMemory m;
  m.kv_bytes = 2.0 * double(s.layers) * b * double(capacity) * kvd * kv_elem;
  m.prefill_bytes = indices(rows_prefill) + 8 * b +
                    std::max(tables(first_rows) +
                                 std::max(block(rows_prefill, double(prompt)), head(rows_prefill)),
                             making(rows_prefill, 0, first_rows));
  if (capacity - prompt >= 2)
    m.decode_bytes = logits + indices(b) +
                     std::max(tables(last_rows) + std::max(block(b, double(capacity - 1)), head(b)),
                              making(b, before_last, last_rows));
  return m;
}

}  // namespace tessel::plan
