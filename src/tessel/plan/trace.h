// SPDX-License-Identifier: Apache-2.0
// The shape-only trace of a training step (the planner's input, issue "planner" item 1): any
// model family's model is built on the meta device through the family interface, and its
// forward, cross-entropy loss and backward run through the real ops and autograd layers with the
// meta backend underneath, which reports every kernel with its FLOPs and bytes
// (kernels/meta/meta_backend.cpp has the counting rules). Module hooks tag each op with the module
// it runs in; autograd carries the tag into the backward. Nothing is allocated and nothing is
// computed, so the 175B-parameter shapes cost the same milliseconds as the tiny ones.
// What is counted and why: docs/PLANNER.md, "Trace".
#pragma once

#include <cstdint>

#include "tessel/core/dtype.h"
#include "tessel/models/causal_lm.h"
#include "tessel/nn/recompute.h"
#include "tessel/plan/graph.h"

namespace tessel::plan {

struct TraceOptions {
  int64_t batch = 1;  // sequences per micro-batch
  int64_t seq = 0;    // tokens per sequence; 0: the model's max_positions
  nn::Recompute recompute = nn::Recompute::None;
  // The layers' compute dtype: f32, or bf16 / f16 under autocast (nn::LowPrecisionScope; the
  // masters stay f32, as the trainer's --precision runs them).
  DType compute_dtype = DType::F32;
  bool dropout = true;  // train mode (the config's dropout); false traces eval-mode dropout
};

// Forward + loss + backward of one micro-batch of `config`'s model, as a graph.
Graph trace_training_step(const models::ModelConfig& config, const TraceOptions& options);

}  // namespace tessel::plan
