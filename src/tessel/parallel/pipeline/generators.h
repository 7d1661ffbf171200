// SPDX-License-Identifier: Apache-2.0
// Generators of the classic pipeline schedules as per-rank action lists:
// - GPipe (Huang et al., NeurIPS 2019): all forwards, then all backwards; every rank holds the
//   activations of all m micro-batches at once.
// - 1F1B, the PipeDream-Flush order (Narayanan et al., ICML 2021; Megatron-LM's default):
//   rank r runs p-1-r warm-up forwards, then alternates one forward and one backward, then drains
//   the remaining backwards; at most p-r micro-batches are in flight on rank r, same bubble.
// - Interleaved 1F1B (Narayanan et al., SC 2021): each rank holds v model chunks (stages r, r+p,
//   ...); micro-batches advance in groups of p through the chunks, which divides the bubble by v
//   at the price of v times more messages.
// Each generator puts a receive right before the compute that consumes it and a send right after
// the compute that produces it (the semantics in schedule.h: buffered sends, blocking receives).
#pragma once

#include "tessel/parallel/pipeline/schedule.h"

namespace tessel::parallel::pipeline {

Schedule gpipe(int ranks, int microbatches);
Schedule one_f_one_b(int ranks, int microbatches);
// microbatches must be a multiple of ranks (as in Megatron-LM): micro-batches move in groups of p.
Schedule interleaved(int ranks, int microbatches, int virtual_stages);

// By name: "gpipe", "1f1b", "interleaved" (virtual_stages is used by "interleaved" only).
Schedule make_schedule(const std::string& name, int ranks, int microbatches,
                       int virtual_stages = 2);

}  // namespace tessel::parallel::pipeline
