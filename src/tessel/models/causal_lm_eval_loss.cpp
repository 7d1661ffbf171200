// SPDX-License-Identifier: Apache-2.0
// Evaluation loss in chunks of positions: a causal LM's head is per token (final norm, then the
// vocabulary projection), so its logits can be made and consumed a few positions at a time after
// one pass through the blocks: the chunked output-layer cross-entropy of Liger Kernel's fused
// linear cross-entropy (Hsu et al., 2024), without its gradient, which evaluation does not need.
// For GPT-2 124M at 1024 tokens the whole [1, 1024, 50257] f32 logits are 196 MiB; one
// 166-position chunk is 32 MiB (kLossChunkBytes). With TESSEL_DUMP_DIR set it dumps the
// activations forward() would (the head's joined from its chunks: a debugging copy of them all).
#include <algorithm>

#include "tessel/autograd/grad_mode.h"
#include "tessel/models/activation_dump.h"
#include "tessel/models/causal_lm.h"
#include "tessel/ops/loss.h"
#include "tessel/ops/ops.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::models {

int64_t loss_chunk_positions(int64_t batch, int64_t vocab) {
  TESSEL_CHECK(batch >= 1 && vocab >= 1, "loss_chunk_positions: batch ", batch, " vocab ", vocab,
               " must be >= 1");
  return std::max<int64_t>(1, kLossChunkBytes / (batch * vocab * int64_t(sizeof(float))));
}

void CausalLM::for_each_logits_chunk(
    const Tensor& ids, int64_t positions,
    const std::function<void(const Tensor& logits, int64_t first)>& each,
    const std::function<Tensor(const Tensor&)>& before_head) {
  // Without a graph the chunks' logits are freed as soon as `each` returns; with one, every
  // chunk would be kept for backward and nothing would be saved.
  TESSEL_CHECK(!autograd::grad_enabled(), type_name(),
               ": chunked evaluation is inference only (run it under NoGradGuard)");
  TESSEL_CHECK(positions >= 0, type_name(), ": chunk of ", positions, " positions must be >= 0");
  // Through run_forward, so hooks on the whole model (ZeRO-3 gathering the embeddings the tied
  // head reuses) bracket the trunk and every chunk of the head, as they bracket forward().
  // With TESSEL_DUMP_DIR set, the dump holds what forward()'s would: the trunk's intermediates,
  // and the head's joined from its chunks (activation_dump.h).
  const std::optional<std::string> dir = ActivationDump::directory();
  std::optional<ActivationDump> dump;
  if (dir) dump.emplace(*this);
  run_forward({ids}, [&] {
    const Tensor hidden = before_head ? before_head(trunk(ids)) : trunk(ids);
    if (dump) dump->begin_pieces();
    const int64_t b = hidden.size(0), t = hidden.size(1);
    // 0: the byte bound on the whole vocabulary (under tensor parallelism each rank's share is
    // smaller, so its chunks are smaller than the bound).
    const int64_t step =
        positions > 0 ? positions : loss_chunk_positions(b, model_config().vocabulary_size());
    for (int64_t first = 0; first < t; first += step) {
      const int64_t c = std::min(step, t - first);
      // A view when the batch is one sequence; otherwise the chunk's rows are copied.
      const Tensor piece = b == 1 ? hidden.narrow(1, first, c) : hidden.slice(1, first, first + c);
      each(head(piece), first);
    }
    return Tensor();
  });
  if (dump) dump->write(*dir, dump_count_++);
}

Tensor CausalLM::eval_loss(const Tensor& ids, const Tensor& targets, int64_t positions) {
  TESSEL_CHECK(targets.shape() == ids.shape(), type_name(), ".eval_loss: targets ", targets.shape(),
               " expected the shape of ids ", ids.shape());
  const int64_t b = ids.size(0), n = ids.numel();
  std::vector<Tensor> losses;  // each chunk's per-token losses [B, c]
  for_each_logits_chunk(ids, positions, [&](const Tensor& logits, int64_t first) {
    const int64_t c = logits.size(1);
    const Tensor tgt = targets.slice(1, first, first + c).reshape({b * c});
    losses.push_back(
        ops::cross_entropy(logits.reshape({b * c, logits.size(2)}), tgt, -100, ops::Reduction::None)
            .reshape({b, c}));
  });
  // The per-token losses in loss()'s order, reduced as ops::cross_entropy's Mean reduces them
  // (one sum, times 1 / the counted targets), so the value is loss()'s bit for bit.
  const Tensor all = losses.size() == 1 ? losses[0] : ops::concat(losses, 1);
  int64_t counted = 0;
  for (int64_t v : to_device(targets, Device::cpu()).to_vector<int64_t>()) counted += v != -100;
  return ops::mul(ops::sum(all.reshape({n})), 1.0 / double(counted));
}

}  // namespace tessel::models
