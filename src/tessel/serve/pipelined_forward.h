// SPDX-License-Identifier: Apache-2.0
// A model whose forward can be started and finished apart, so that the engine can keep several
// steps in flight (cross-step pipelining of inference, as vLLM's "virtual engines" and
// TensorRT-LLM's pipeline-parallel executor do): on rank 0 of a pipeline, begin_forward runs the
// first stage and hands the hidden states on, and end_forward waits for the last stage's logits.
// Between the two the engine plans and starts another group's step, which the first stage
// computes while the later stages still work on the previous one.
#pragma once

#include <cstdint>

#include "tessel/models/causal_lm.h"

namespace tessel::serve {

class PipelinedForward {
 public:
  virtual ~PipelinedForward() = default;
  // Starts what forward_cached(ids, cache, rows) computes; returns a ticket. Whatever the forward
  // writes into `cache`'s pool is ordered after every earlier begin_forward's writes.
  virtual int64_t begin_forward(const Tensor& ids, models::DecodeCache& cache,
                                const Tensor& rows) = 0;
  // The logits of the oldest unfinished ticket (which `ticket` must be): forwards finish in the
  // order they began, as the stages run them.
  virtual Tensor end_forward(int64_t ticket) = 0;
};

}  // namespace tessel::serve
