// SPDX-License-Identifier: Apache-2.0
// Per-rank accumulation from the global batch and the layout.
#include "tessel/train/global_batch.h"

#include "tessel/core/error.h"

namespace tessel::train {

GlobalBatch resolve_global_batch(const TrainSection& t, int64_t dp) {
  TESSEL_CHECK(dp >= 1 && t.micro_batch >= 1 && t.grad_accum >= 1 && t.global_batch >= 0,
               "global batch: dp ", dp, ", train.micro_batch ", t.micro_batch,
               ", train.grad_accum ", t.grad_accum, ", train.global_batch ", t.global_batch);
  GlobalBatch out;
  if (t.global_batch == 0) {
    out.grad_accum = t.grad_accum;
    out.sequences = t.micro_batch * t.grad_accum * dp;
    return out;
  }
  const int64_t per_micro_step = t.micro_batch * dp;
  if (t.global_batch % per_micro_step != 0) {
    std::string fits;  // micro-batch sizes that divide the global batch over this dp
    for (int64_t b = 1; b <= t.global_batch / dp && fits.size() < 40; ++b)
      if (t.global_batch % (b * dp) == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(b);
    TESSEL_FAIL("train.global_batch = ", t.global_batch,
                " sequences per step is not a whole number of micro-steps of train.micro_batch = ",
                t.micro_batch, " x dp = ", dp, " (", per_micro_step, " sequences)",
                fits.empty() ? std::string("; no micro_batch divides it over this dp: change "
                                           "train.global_batch or the dp degree")
                             : "; set train.micro_batch to one of " + fits +
                                   ", or change train.global_batch");
  }
  out.sequences = t.global_batch;
  out.grad_accum = t.global_batch / per_micro_step;
  if (out.grad_accum != t.grad_accum)
    out.note = "train.grad_accum = " + std::to_string(out.grad_accum) + " (configured " +
               std::to_string(t.grad_accum) +
               "): train.global_batch = " + std::to_string(t.global_batch) + " sequences over dp " +
               std::to_string(dp) + " x micro_batch " + std::to_string(t.micro_batch);
  return out;
}

}  // namespace tessel::train
