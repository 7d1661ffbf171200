// SPDX-License-Identifier: Apache-2.0
// Attention as a runtime without a fused kernel runs it: Megatron-LM before FlashAttention (the
// runs of Narayanan et al. 2021 and Korthikanti et al. 2022) and PyTorch's eager
// softmax(QKᵀ/√d)·V. Two batched products over the whole [s_q, s_k] score matrix — the causal
// mask is applied to their result, so its masked half is computed too — and a softmax between
// them, the scores written to memory and read back by each kernel; in the backward four products
// and the softmax's backward over the saved probabilities. tessel's runtime runs one fused kernel
// instead (flash attention, Dao et al. 2022: the scores stay on chip, the masked half is skipped),
// which is what a trace records; `tessel plan memory|search --attention unfused` re-costs the
// trace's attention nodes this way to predict a layout as such a runtime would run it
// (docs/PLANNER.md, "Training plans: published scale"). Time only: the probabilities such a
// runtime saves for its backward are not added to the memory model.
#pragma once

#include "tessel/plan/graph.h"

namespace tessel::plan {

// The detail an attention node carries once re-costed unfused (compute_cost.h reads it).
inline constexpr const char* kUnfusedDetail = "unfused";

// An "attention" or "attention_backward" node (inputs q [b, s_q, h_q, d], k [b, s_k, h_k, d],
// v [b, s_k, h_k, d_v], ...).
bool is_attention(const OpNode& op);
bool is_unfused_attention(const OpNode& op);

// The node's cost as the unfused kernels incur it, from its shapes: with E = b·h_q·s_q·s_k scores
// of the inputs' element size e, the forward's products 2E(d + d_v) FLOPs, the softmax 5E, and
// 4E·e bytes more (the scores written and read, the probabilities written and read); the
// backward's products 4E(d + d_v), the softmax's backward 4E, and 7E·e bytes more (the
// probabilities' and the scores' gradients written, read by the softmax's backward and the
// products). The fused kernel's own reads and writes (q, k, v, the output) stay.
Cost unfused_attention_cost(const OpNode& op);

// The product shape one head's score product has: [s_q, d] x [d, s_k].
struct ScoreShape {
  int64_t s_q = 0, s_k = 0, d = 0;
};
ScoreShape score_shape(const OpNode& op);

}  // namespace tessel::plan
