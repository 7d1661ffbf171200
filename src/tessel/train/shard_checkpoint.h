// SPDX-License-Identifier: Apache-2.0
// Per-rank checkpoint shards of a ZeRO run, the format of earlier tessel versions: the trainer now
// writes layout-independent pieces (checkpoint_pieces.h) and reads these only to resume older
// checkpoints (and the writers stay for tests). Every dp rank wrote one file with its block of each
// flat bucket: the parameters ("param.b<i>") and the AdamW moments ("exp_avg.b<i>",
// "exp_avg_sq.b<i>"); rank 0 writes an index (zero_index.json) with the flat layout: dp size,
// stage, and per bucket its length, padded length, block size and every parameter's name, shape
// and offset. That is enough to rebuild each full tensor from the blocks, which is how a run at
// another dp size or ZeRO stage resumes: it reassembles full tensors and keeps its own blocks of
// them (the per-tensor reassembly of torch.distributed.checkpoint's resharding, on flat buffers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/parallel/data_parallel.h"
#include "tessel/tensor/tensor.h"

namespace tessel::train {

using ShardTensors = std::vector<std::pair<std::string, Tensor>>;

inline constexpr const char* kZeroIndexFile = "zero_index.json";

// "zero_shard_00001_of_00004.safetensors"
std::string zero_shard_file_name(int rank, int size);

// This rank's block of every bucket's flat parameters, taken from the full parameters (stages 1
// and 2, where every rank holds them whole).
std::vector<Tensor> parameter_blocks(const parallel::DataParallel& dp);

// Writes this rank's shard file into `dir`: param_blocks[i] and the moments of
// ZeroAdamW::local_state() (names "exp_avg.b<i>", "exp_avg_sq.b<i>").
void write_zero_shard(const std::string& dir, const parallel::DataParallel& dp, int stage,
                      const std::vector<Tensor>& param_blocks, const ShardTensors& local_moments);
// Rank 0: the index describing the layout every shard file follows.
void write_zero_index(const std::string& dir, const parallel::DataParallel& dp, int stage);

bool has_zero_shards(const std::string& dir);

struct AssembledState {
  int dp = 0, stage = 0;
  ShardTensors params;   // full parameters by name (model order)
  ShardTensors moments;  // "exp_avg.NAME" for every parameter, then "exp_avg_sq.NAME"
};
// Reads the index and every shard file of `dir`, checks them against each other, and rebuilds
// the full tensors. An Error names the file and what disagrees.
AssembledState assemble_zero_shards(const std::string& dir);

}  // namespace tessel::train
