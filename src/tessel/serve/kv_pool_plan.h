// SPDX-License-Identifier: Apache-2.0
// How large the engine's paged KV pool is (PagedAttention, Kwon et al. 2023): the geometry and
// dtype of the cache the model expects (this rank's heads under tensor parallelism) and the number
// of blocks, from --kv-cache-bytes or a fraction of the available memory. Under tensor parallelism
// every rank computes its own figure and all take the smallest, so that rank 0's block ids are
// valid in every rank's pool.
#pragma once

#include <cstdint>
#include <functional>

#include "tessel/models/causal_lm.h"
#include "tessel/serve/engine_options.h"

namespace tessel::serve {

struct KvPoolPlan {
  models::KvGeometry geometry;
  DType dtype = DType::F32;
  int64_t context_length = 0;  // the longest prompt + output
  int64_t num_blocks = 0;
};

// The fraction of MemAvailable a pool takes by default.
inline constexpr double kDefaultKvFraction = 0.4;

// `agree` (optional) turns this rank's block count into the one every rank uses (a minimum over
// the tensor-parallel group; collective). Refuses a pool that cannot hold one full-length sequence
// plus a copy-on-write block, naming the figures.
KvPoolPlan plan_kv_pool(const models::CausalLM& model, const EngineOptions& options,
                        const std::function<int64_t(int64_t)>& agree = {});

}  // namespace tessel::serve
