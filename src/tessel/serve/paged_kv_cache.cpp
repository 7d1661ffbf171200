// SPDX-License-Identifier: Apache-2.0
// Paged KV pools and the packing of one step's ragged batch.
#include "tessel/serve/paged_kv_cache.h"

#include <algorithm>
#include <cstring>

#include "tessel/core/error.h"
#include "tessel/ops/paged_attention.h"

namespace tessel::serve {

PagedKvPool::PagedKvPool(const models::KvGeometry& geometry, int64_t num_blocks, int64_t block_size,
                         DType dtype)
    : geometry_(geometry), num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  TESSEL_CHECK(geometry.layers > 0 && geometry.kv_heads > 0 && geometry.head_dim > 0,
               "PagedKvPool: geometry of ", geometry.layers, " layers, ", geometry.kv_heads,
               " KV heads of ", geometry.head_dim, " must be positive");
  TESSEL_CHECK(num_blocks >= 1 && block_size >= 1, "PagedKvPool: ", num_blocks, " blocks of ",
               block_size, " tokens");
  TESSEL_CHECK(dtype_is_float(dtype), "PagedKvPool: dtype ", dtype_name(dtype),
               " expected a floating type");
  const Shape shape{num_blocks, block_size, geometry.kv_heads, geometry.head_dim};
  for (int64_t l = 0; l < geometry.layers; ++l) {
    keys_.push_back(zeros(shape, dtype));
    values_.push_back(zeros(shape, dtype));
  }
}

int64_t PagedKvPool::blocks_for(const models::KvGeometry& geometry, int64_t bytes,
                                int64_t block_size, DType dtype) {
  const int64_t per_block = geometry.bytes_per_token(int64_t(dtype_size(dtype))) * block_size;
  return std::max<int64_t>(1, bytes / per_block);
}

size_t PagedKvPool::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : keys_) n += t.nbytes();
  for (const Tensor& t : values_) n += t.nbytes();
  return n;
}

void PagedKvPool::copy_block(BlockId from, BlockId to) {
  TESSEL_CHECK(from >= 0 && from < num_blocks_ && to >= 0 && to < num_blocks_,
               "PagedKvPool.copy_block: ", from, " -> ", to, " outside [0, ", num_blocks_, ")");
  const size_t block = keys_[0].nbytes() / size_t(num_blocks_);
  for (std::vector<Tensor>* pools : {&keys_, &values_}) {
    for (Tensor& t : *pools) {
      char* base = static_cast<char*>(t.data_ptr());
      std::memcpy(base + size_t(to) * block, base + size_t(from) * block, block);
    }
  }
}

PagedStep::PagedStep(PagedKvPool& pool, const BlockManager& blocks, const StepPlan& plan)
    : pool_(pool) {
  const int64_t seqs = int64_t(plan.chunks.size());
  TESSEL_CHECK(seqs >= 1, "PagedStep: an empty plan");
  size_t widest = 1;
  for (const ScheduledChunk& c : plan.chunks) {
    tokens_ += c.count;
    widest = std::max(widest, blocks.block_table(c.seq->id).size());
  }
  t_.ids = empty(Shape{1, tokens_}, DType::I64);
  t_.positions = empty(Shape{1, tokens_}, DType::I64);
  t_.slots = empty(Shape{tokens_}, DType::I64);
  t_.block_tables = full(Shape{seqs, int64_t(widest)}, -1.0, DType::I32);
  t_.seq_lens = empty(Shape{seqs}, DType::I64);
  t_.query_starts = empty(Shape{seqs + 1}, DType::I64);
  int64_t* ids = t_.ids.data<int64_t>();
  int64_t* pos = t_.positions.data<int64_t>();
  int64_t* slots = t_.slots.data<int64_t>();
  int32_t* tables = t_.block_tables.data<int32_t>();
  int64_t* lens = t_.seq_lens.data<int64_t>();
  int64_t* starts = t_.query_starts.data<int64_t>();
  std::vector<int64_t> rows;
  int64_t n = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    const ScheduledChunk& c = plan.chunks[size_t(s)];
    const Sequence& seq = *c.seq;
    TESSEL_CHECK(c.count >= 1 && c.start + c.count <= int64_t(seq.tokens.size()) &&
                     c.start + c.count <= blocks.length(seq.id),
                 "PagedStep: chunk [", c.start, ", ", c.start + c.count, ") of sequence ", seq.id,
                 " with ", seq.tokens.size(), " tokens and ", blocks.length(seq.id), " slots");
    starts[s] = n;
    for (int64_t i = 0; i < c.count; ++i, ++n) {
      ids[n] = seq.tokens[size_t(c.start + i)];
      pos[n] = c.start + i;
      slots[n] = blocks.slot(seq.id, c.start + i);
    }
    lens[s] = c.start + c.count;
    position_end_ = std::max(position_end_, lens[s]);
    const std::vector<BlockId>& table = blocks.block_table(seq.id);
    std::copy(table.begin(), table.end(), tables + s * int64_t(widest));
    if (c.sample) {
      rows.push_back(n - 1);
      sampled_.push_back(size_t(s));
    }
  }
  starts[seqs] = n;
  t_.rows = from_data(rows, Shape{int64_t(rows.size())});
}

PagedStep::PagedStep(PagedKvPool& pool, StepTensors packed)
    : PagedStep(pool, std::move(packed), -1) {}

PagedStep::PagedStep(PagedKvPool& pool, StepTensors packed, int64_t position_end)
    : pool_(pool), t_(std::move(packed)) {
  TESSEL_CHECK(t_.ids.ndim() == 2 && t_.ids.size(0) == 1 &&
                   t_.positions.shape() == t_.ids.shape() && t_.slots.numel() == t_.ids.numel() &&
                   t_.seq_lens.ndim() == 1 && t_.query_starts.numel() == t_.seq_lens.numel() + 1 &&
                   t_.block_tables.ndim() == 2 && t_.block_tables.size(0) == t_.seq_lens.numel(),
               "PagedStep: packed ids ", t_.ids.shape(), ", positions ", t_.positions.shape(),
               ", slots ", t_.slots.shape(), ", block tables ", t_.block_tables.shape(),
               ", seq_lens ", t_.seq_lens.shape(), ", query_starts ", t_.query_starts.shape(),
               " do not describe one step");
  tokens_ = t_.ids.size(1);
  if (position_end >= 0) {
    TESSEL_CHECK(t_.seq_lens.device().is_meta(), "PagedStep: a position end (", position_end,
                 ") is given for a shape-only step only");
    position_end_ = position_end;
    return;
  }
  const int64_t* lens = t_.seq_lens.data<int64_t>();
  for (int64_t s = 0; s < t_.seq_lens.numel(); ++s)
    position_end_ = std::max(position_end_, lens[s]);
}

void PagedStep::check_step(int64_t batch, int64_t tokens) const {
  TESSEL_CHECK(batch == 1 && tokens == tokens_, "PagedStep: a step of ", batch, " x ", tokens,
               " tokens for a packed batch of 1 x ", tokens_);
}

Tensor PagedStep::positions(int64_t batch, int64_t tokens) const {
  check_step(batch, tokens);
  return t_.positions;
}

int64_t PagedStep::position_end(int64_t batch, int64_t tokens) const {
  check_step(batch, tokens);
  return position_end_;
}

Tensor PagedStep::attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                         int64_t window) {
  TESSEL_CHECK(layer >= 0 && layer < n_layer(), "PagedStep.attend: layer ", layer, " outside [0, ",
               n_layer(), ")");
  TESSEL_CHECK(q.ndim() == 4 && q.size(0) == 1 && q.size(1) == tokens_, "PagedStep.attend: q ",
               q.shape(), " expected [1, ", tokens_, ", H, D]");
  const int64_t hkv = kv_heads(), d = head_dim();
  // A pool of another dtype than the model's (`--kv-cache-dtype`) stores the rounded values.
  const DType pd = pool_.dtype();
  ops::paged_kv_store(k.to(pd).reshape({tokens_, hkv, d}), v.to(pd).reshape({tokens_, hkv, d}),
                      t_.slots, pool_.keys(layer), pool_.values(layer));
  ops::PagedAttentionOptions options;
  options.window = window;
  Tensor y = ops::paged_attention(q.reshape({tokens_, q.size(2), d}), pool_.keys(layer),
                                  pool_.values(layer), t_.block_tables, t_.seq_lens,
                                  t_.query_starts, options);
  return y.reshape({1, tokens_, q.size(2), d});
}

}  // namespace tessel::serve
