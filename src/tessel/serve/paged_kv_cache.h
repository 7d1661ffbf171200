// SPDX-License-Identifier: Apache-2.0
// The paged KV cache's memory (PagedAttention, Kwon et al. 2023): per layer a key pool and a value
// pool of [num_blocks, block_size, Hkv, D] in the model's dtype, and PagedStep, the
// models::DecodeCache of one engine step: the step's tokens of every scheduled sequence packed into
// one row [1, N], each at its own position, its keys and values stored at the slots the block
// manager gave it, its queries attending through the block tables.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/serve/block_manager.h"
#include "tessel/serve/scheduler.h"

namespace tessel::serve {

class PagedKvPool {
 public:
  PagedKvPool(const models::KvGeometry& geometry, int64_t num_blocks, int64_t block_size,
              DType dtype);
  // The blocks that fit in `bytes` (at least one).
  static int64_t blocks_for(const models::KvGeometry& geometry, int64_t bytes, int64_t block_size,
                            DType dtype);

  const models::KvGeometry& geometry() const { return geometry_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  size_t nbytes() const;
  Tensor& keys(int64_t layer) { return keys_[size_t(layer)]; }
  Tensor& values(int64_t layer) { return values_[size_t(layer)]; }
  // Copies block `from` to block `to` in every layer (copy-on-write).
  void copy_block(BlockId from, BlockId to);

 private:
  models::KvGeometry geometry_;
  int64_t num_blocks_, block_size_;
  DType dtype_;
  std::vector<Tensor> keys_, values_;
};

// Everything the model runner needs of one step, with no reference to sequences or the block
// manager: what rank 0 sends to the other tensor-parallel ranks (serve/step_mirror.h).
struct StepTensors {
  Tensor ids, positions;  // i64 [1, N]
  Tensor slots;           // i64 [N]: where each token's K and V go in the pool
  Tensor block_tables;    // i32 [S, W], -1 past a sequence's last block
  Tensor seq_lens;        // i64 [S]: keys of each sequence after the step
  Tensor query_starts;    // i64 [S + 1]: each sequence's rows in N
  Tensor rows;            // i64 [R]: the tokens whose logits are wanted
};

// One step's batch as the model sees it: ids [1, N] and the DecodeCache over the pool.
class PagedStep final : public models::DecodeCache {
 public:
  // Packs the plan's chunks in order; `blocks` gives their slots and tables.
  PagedStep(PagedKvPool& pool, const BlockManager& blocks, const StepPlan& plan);
  // A step packed elsewhere (rank 0's, on another tensor-parallel rank).
  PagedStep(PagedKvPool& pool, StepTensors packed);
  // A shape-only step (meta tensors without values, the planner's trace, serve/step_memory.h):
  // `position_end` is the longest sequence's keys after it.
  PagedStep(PagedKvPool& pool, StepTensors packed, int64_t position_end);

  const StepTensors& tensors() const { return t_; }
  PagedKvPool& pool() const { return pool_; }   // (a pipeline stage packs micro-batches over it)
  const Tensor& ids() const { return t_.ids; }  // i64 [1, N]
  // i64 [R]: the token (index into N) whose logits each sampling chunk needs, in plan order.
  const Tensor& sample_rows() const { return t_.rows; }
  // For each sampling chunk, its index in plan.chunks (the row order of the logits).
  const std::vector<size_t>& sampled_chunks() const { return sampled_; }

  int64_t n_layer() const override { return pool_.geometry().layers; }
  int64_t kv_heads() const override { return pool_.geometry().kv_heads; }
  int64_t head_dim() const override { return pool_.geometry().head_dim; }
  Tensor positions(int64_t batch, int64_t tokens) const override;
  int64_t position_end(int64_t batch, int64_t tokens) const override;
  Tensor attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                int64_t window) override;

 private:
  void check_step(int64_t batch, int64_t tokens) const;

  PagedKvPool& pool_;
  int64_t tokens_ = 0, position_end_ = 0;
  StepTensors t_;
  std::vector<size_t> sampled_;
};

}  // namespace tessel::serve
