// SPDX-License-Identifier: Apache-2.0
// An engine step cut into micro-batches of whole sequences for a pipeline of stages (GPipe's
// micro-batches, Huang et al. 2019; serve/pipeline_stage_model.h): each piece is a StepTensors of
// its own over the same KV pool, so a stage can run piece m while the next stage runs piece m - 1.
// A sequence is never split (its chunk's queries attend to each other), and every rank cuts the
// same step the same way, so no cut is sent.
#pragma once

#include <vector>

#include "tessel/serve/paged_kv_cache.h"

namespace tessel::serve {

// At most `parts` (>= 1) pieces of consecutive sequences, each non-empty, balanced by tokens (a
// cut falls at the first sequence boundary at or past each equal share of the tokens). Every
// piece's ids, positions and slots are its tokens' in order, its query_starts start at 0, and its
// rows are the step's rows among its tokens (in order, relative to its first token); the pieces'
// rows concatenated are the step's rows. One piece is the step itself.
std::vector<StepTensors> split_step(const StepTensors& step, int parts);

}  // namespace tessel::serve
