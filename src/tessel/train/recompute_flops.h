// SPDX-License-Identifier: Apache-2.0
// The FLOPs activation recomputation adds to a training step, for hardware FLOPs utilisation
// (HFU, Korthikanti et al. 2022) beside MFU: MFU counts the model's FLOPs only, HFU also the
// forward work the recomputation repeats, so HFU = (flops_per_token + recompute_flops_per_token)
// * tokens/s / peak. Counted the way flops_per_token (metrics.h) counts: 2 FLOPs per parameter per
// token for a forward, 2 C T per layer per token for the causal attention forward.
#pragma once

#include <cstdint>

#include "tessel/models/gpt2_config.h"
#include "tessel/nn/transformer.h"

namespace tessel::train {

// Extra forward FLOPs per token for `mode` at sequence length `seq_len`: 0 for none; for
// selective the fused QKV projection and the attention core of every layer; for full every
// block's parameters and its attention (the embeddings, ln_f and the LM head run once).
double recompute_flops_per_token(const models::GPT2Config& config, nn::Recompute mode,
                                 int64_t seq_len);

}  // namespace tessel::train
