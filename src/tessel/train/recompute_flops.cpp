// SPDX-License-Identifier: Apache-2.0
// Recomputed FLOPs per token for each nn::Recompute mode (see recompute_flops.h).
#include "tessel/train/recompute_flops.h"

#include "tessel/core/error.h"

namespace tessel::train {

double recompute_flops_per_token(const models::GPT2Config& config, nn::Recompute mode,
                                 int64_t seq_len) {
  TESSEL_CHECK(seq_len >= 1, "recompute_flops_per_token: seq_len ", seq_len, " must be >= 1");
  const nn::BlockConfig b = config.block_config();
  const double c = double(b.n_embd), inner = double(b.inner()), bias = b.bias ? 1.0 : 0.0;
  const double layers = double(config.n_layer);
  const double attention = 2.0 * c * double(seq_len);  // causal QK^T and PV, forward
  // Parameters per part; a LayerNorm counts as its parameters, as in flops_per_token.
  const double ln = c * (1.0 + bias);
  const double qkv = 3.0 * c * c + 3.0 * c * bias;
  switch (mode) {
    case nn::Recompute::None:
      return 0.0;
    case nn::Recompute::Selective:
      return layers * (2.0 * (ln + qkv) + attention);
    case nn::Recompute::Full: {
      const double block =
          2.0 * ln + qkv + (c * c + c * bias) + (c * inner + inner * bias) + (inner * c + c * bias);
      return layers * (2.0 * block + attention);
    }
  }
  TESSEL_FAIL("recompute_flops_per_token: unknown mode ", int(mode));
}

}  // namespace tessel::train
