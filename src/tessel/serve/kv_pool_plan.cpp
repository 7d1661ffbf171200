// SPDX-License-Identifier: Apache-2.0
// The KV pool's size: the model's cache geometry, the context, and blocks from the byte budget.
#include "tessel/serve/kv_pool_plan.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/serve/paged_kv_cache.h"

namespace tessel::serve {
namespace {

// MemAvailable from /proc/meminfo in bytes (0 when unreadable).
int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

}  // namespace

KvPoolPlan plan_kv_pool(const models::CausalLM& model, const EngineOptions& options,
                        const std::function<int64_t(int64_t)>& agree) {
  KvPoolPlan plan;
  const models::ModelConfig& config = model.model_config();
  plan.context_length = config.max_positions();
  if (options.max_model_len > 0)
    plan.context_length = std::min(plan.context_length, options.max_model_len);
  // The cache this rank's model expects (its heads under tensor parallelism, its dtype).
  const models::KVCache probe = model.make_cache(1, 1);
  plan.geometry = models::KvGeometry{probe.n_layer(), probe.kv_heads(), probe.head_dim()};
  plan.dtype = probe.dtype();
  if (options.kv_cache_dtype != "auto") {
    const DType chosen = dtype_from_name(options.kv_cache_dtype);
    TESSEL_CHECK(chosen == DType::F32 || chosen == DType::BF16 || chosen == DType::F16,
                 "Engine: --kv-cache-dtype ", options.kv_cache_dtype,
                 ": expected auto, f32, bf16 or f16");
    TESSEL_CHECK(plan.dtype != DType::F64 || chosen == DType::F64, "Engine: --kv-cache-dtype ",
                 options.kv_cache_dtype,
                 " under an f64 model (attention over an f64 model's "
                 "queries reads f64 pools only)");
    plan.dtype = chosen;
  }
  const int64_t per_token = plan.geometry.bytes_per_token(int64_t(dtype_size(plan.dtype)));
  const int64_t blocks_per_seq =
      (plan.context_length + options.block_size - 1) / options.block_size;
  // One full-length sequence must fit (so the oldest request can always proceed), plus one
  // block for a copy-on-write.
  const int64_t minimum = blocks_per_seq + 1;
  int64_t num_blocks = 0;
  if (options.kv_cache_bytes > 0) {
    num_blocks = PagedKvPool::blocks_for(plan.geometry, options.kv_cache_bytes, options.block_size,
                                         plan.dtype);
  } else {
    const int64_t budget = int64_t(kDefaultKvFraction * double(available_memory()));
    num_blocks = PagedKvPool::blocks_for(plan.geometry, budget, options.block_size, plan.dtype);
    // More than every sequence at full length could use is wasted.
    num_blocks = std::min(num_blocks, options.max_seqs * blocks_per_seq + 1);
  }
  if (agree) num_blocks = agree(num_blocks);
  if (options.kv_cache_bytes > 0) {
    TESSEL_CHECK(num_blocks >= minimum, "Engine: --kv-cache-bytes ", options.kv_cache_bytes,
                 " holds ", num_blocks, " blocks of ", options.block_size,
                 " tokens, fewer than the ", minimum, " one ", plan.context_length,
                 "-token sequence needs (", minimum * options.block_size * per_token,
                 " bytes); give more or lower --max-model-len");
  } else {
    TESSEL_CHECK(num_blocks >= minimum, "Engine: ", kDefaultKvFraction,
                 " of the available memory holds ", num_blocks, " KV blocks, fewer than the ",
                 minimum, " one ", plan.context_length,
                 "-token sequence needs; lower --max-model-len or set --kv-cache-bytes");
  }
  plan.num_blocks = num_blocks;
  return plan;
}

}  // namespace tessel::serve
