// SPDX-License-Identifier: Apache-2.0
// One engine step traced on meta (serve/step_memory.h).
#include "tessel/serve/step_memory.h"

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/serve/paged_kv_cache.h"
#include "tessel/tensor/default_device.h"
#include "tessel/tensor/meta_allocator.h"

namespace tessel::serve {

int64_t trace_step_memory(const models::ModelConfig& config, const EngineOptions& options,
                          int64_t tokens, int64_t seqs, int64_t context,
                          const StepRankModel& rank) {
  TESSEL_CHECK(seqs >= 1 && tokens >= seqs && context >= 1 && options.block_size >= 1,
               "engine step memory: ", tokens, " tokens of ", seqs, " sequences at context ",
               context, ", blocks of ", options.block_size,
               " (each sequence needs a token, a context and a block size >= 1)");
  DefaultDeviceScope meta(Device::meta());
  autograd::NoGradGuard no_grad;
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (rank.transform) rank.transform(*model);
  model->eval();
  // The pool the engine makes (plan_kv_pool reads the same cache probe), one table per sequence.
  const models::KVCache probe = model->make_cache(1, 1);
  const models::KvGeometry geometry{probe.n_layer(), probe.kv_heads(), probe.head_dim()};
  const int64_t width = (context + options.block_size - 1) / options.block_size;
  PagedKvPool pool(geometry, seqs * width + 1, options.block_size, probe.dtype());
  MetaAllocator& a = meta_allocator();
  const int64_t held = int64_t(a.bytes_in_use());
  a.reset_peak();
  {
    // As Engine::State::run_step: the step packed (PagedStep's tensors), the forward, the logits
    // gathered (tensor parallelism) and made f32 for the samplers.
    StepTensors t;
    t.ids = empty({1, tokens}, DType::I64);
    t.positions = empty({1, tokens}, DType::I64);
    t.slots = empty({tokens}, DType::I64);
    t.block_tables = full({seqs, width}, -1.0, DType::I32);
    t.seq_lens = empty({seqs}, DType::I64);
    t.query_starts = empty({seqs + 1}, DType::I64);
    t.rows = empty({seqs}, DType::I64);
    PagedStep step(pool, std::move(t), context);
    Tensor logits = model->forward_cached(step.ids(), step, step.sample_rows());
    if (rank.gather_logits) logits = rank.gather_logits(logits);
    logits = logits.to(DType::F32);
  }
  return int64_t(a.peak_bytes()) - held;
}

}  // namespace tessel::serve
