// SPDX-License-Identifier: Apache-2.0
// The global batch (Megatron-LM's global batch size): sequences per optimizer step over every
// data-parallel rank. It is what the optimizer sees, so it is what a run keeps when it resumes in
// another layout; the per-rank accumulation follows from it, the micro-batch and the dp degree:
//   global_batch = micro_batch x grad_accum x dp.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/train/config.h"

namespace tessel::train {

struct GlobalBatch {
  int64_t sequences = 0;   // per optimizer step, over every dp rank
  int64_t grad_accum = 0;  // micro-batches per step on each rank (pipeline: per pipeline step)
  std::string note;        // non-empty when grad_accum differs from train.grad_accum
};

// train.global_batch > 0: grad_accum = global_batch / (micro_batch x dp), an Error naming the
// values (and the micro-batch sizes that would divide) when that is not a whole number.
// train.global_batch = 0: the global batch is micro_batch x grad_accum x dp.
GlobalBatch resolve_global_batch(const TrainSection& train, int64_t dp);

}  // namespace tessel::train
