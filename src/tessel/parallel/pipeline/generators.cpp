// SPDX-License-Identifier: Apache-2.0
// GPipe, 1F1B and interleaved 1F1B as action lists. The compute order per rank is what defines
// a schedule; the messages are derived from it the same way for all three (add_forward,
// add_backward), so a generator cannot get a send or a peer wrong on its own.
#include "tessel/parallel/pipeline/generators.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel::parallel::pipeline {
namespace {

Schedule empty_schedule(std::string name, int ranks, int microbatches, int virtual_stages) {
  TESSEL_CHECK(ranks >= 1, "pipeline ", name, ": ranks must be >= 1, got ", ranks);
  TESSEL_CHECK(microbatches >= 1, "pipeline ", name, ": microbatches must be >= 1, got ",
               microbatches);
  TESSEL_CHECK(virtual_stages >= 1, "pipeline ", name, ": virtual stages must be >= 1, got ",
               virtual_stages);
  Schedule schedule;
  schedule.name = std::move(name);
  schedule.ranks = ranks;
  schedule.virtual_stages = virtual_stages;
  schedule.microbatches = microbatches;
  schedule.actions.resize(static_cast<size_t>(ranks));
  return schedule;
}

// The receive of the input (unless it was produced on this rank), the forward, the send of the
// output (unless it is consumed on this rank or this is the last stage).
void add_forward(Schedule& schedule, int stage, int microbatch) {
  const int rank = schedule.owner(stage);
  auto& list = schedule.actions[static_cast<size_t>(rank)];
  if (stage > 0 && schedule.owner(stage - 1) != rank) {
    list.push_back({ActionKind::RecvActivation, microbatch, stage - 1, schedule.owner(stage - 1)});
  }
  list.push_back({ActionKind::Forward, microbatch, stage});
  if (stage + 1 < schedule.num_stages() && schedule.owner(stage + 1) != rank) {
    list.push_back({ActionKind::SendActivation, microbatch, stage, schedule.owner(stage + 1)});
  }
}

void add_backward(Schedule& schedule, int stage, int microbatch) {
  const int rank = schedule.owner(stage);
  auto& list = schedule.actions[static_cast<size_t>(rank)];
  if (stage + 1 < schedule.num_stages() && schedule.owner(stage + 1) != rank) {
    list.push_back({ActionKind::RecvGradient, microbatch, stage + 1, schedule.owner(stage + 1)});
  }
  list.push_back({ActionKind::Backward, microbatch, stage});
  if (stage > 0 && schedule.owner(stage - 1) != rank) {
    list.push_back({ActionKind::SendGradient, microbatch, stage, schedule.owner(stage - 1)});
  }
}

}  // namespace

Schedule gpipe(int ranks, int microbatches) {
  Schedule schedule = empty_schedule("gpipe", ranks, microbatches, 1);
  for (int rank = 0; rank < ranks; ++rank) {
    for (int mb = 0; mb < microbatches; ++mb) {
      add_forward(schedule, rank, mb);
    }
    for (int mb = 0; mb < microbatches; ++mb) {
      add_backward(schedule, rank, mb);
    }
  }
  return schedule;
}

Schedule one_f_one_b(int ranks, int microbatches) {
  Schedule schedule = empty_schedule("1f1b", ranks, microbatches, 1);
  for (int rank = 0; rank < ranks; ++rank) {
    // Enough forwards that the last rank's first backward can start as soon as possible.
    const int warmup = std::min(ranks - 1 - rank, microbatches);
    int next_forward = 0;
    int next_backward = 0;
    for (; next_forward < warmup; ++next_forward) {
      add_forward(schedule, rank, next_forward);
    }
    for (; next_forward < microbatches; ++next_forward, ++next_backward) {
      add_forward(schedule, rank, next_forward);
      add_backward(schedule, rank, next_backward);
    }
    for (; next_backward < microbatches; ++next_backward) {
      add_backward(schedule, rank, next_backward);
    }
  }
  return schedule;
}

Schedule interleaved(int ranks, int microbatches, int virtual_stages) {
  Schedule schedule = empty_schedule("interleaved", ranks, microbatches, virtual_stages);
  TESSEL_CHECK(microbatches % ranks == 0, "pipeline interleaved: microbatches (", microbatches,
               ") must be a multiple of ranks (", ranks,
               "): micro-batches pass through the chunks in groups of one per rank");
  const int total = microbatches * virtual_stages;  // (chunk, micro-batch) pairs per rank
  const int group = ranks * virtual_stages;
  // The k-th forward of a rank: micro-batches go in groups of p, each group through chunk 0,
  // then chunk 1, ...; backwards visit the chunks in reverse.
  auto microbatch_of = [&](int k) { return (k / group) * ranks + k % ranks; };
  auto forward_chunk = [&](int k) { return (k % group) / ranks; };
  auto backward_chunk = [&](int k) { return virtual_stages - 1 - (k % group) / ranks; };
  for (int rank = 0; rank < ranks; ++rank) {
    // Rank r starts its backwards once the first micro-batch has gone through all v chunks and
    // come back: the other chunks' forwards of the first group, plus twice the distance to the
    // last rank (forward down, gradient up).
    const int warmup = std::min((ranks - 1 - rank) * 2 + (virtual_stages - 1) * ranks, total);
    auto forward = [&](int k) {
      add_forward(schedule, forward_chunk(k) * ranks + rank, microbatch_of(k));
    };
    auto backward = [&](int k) {
      add_backward(schedule, backward_chunk(k) * ranks + rank, microbatch_of(k));
    };
    int next_forward = 0;
    int next_backward = 0;
    for (; next_forward < warmup; ++next_forward) {
      forward(next_forward);
    }
    for (; next_forward < total; ++next_forward, ++next_backward) {
      forward(next_forward);
      backward(next_backward);
    }
    for (; next_backward < total; ++next_backward) {
      backward(next_backward);
    }
  }
  return schedule;
}

Schedule make_schedule(const std::string& name, int ranks, int microbatches, int virtual_stages) {
  if (name == "gpipe") {
    return gpipe(ranks, microbatches);
  }
  if (name == "1f1b") {
    return one_f_one_b(ranks, microbatches);
  }
  if (name == "interleaved") {
    return interleaved(ranks, microbatches, virtual_stages);
  }
  TESSEL_FAIL("pipeline: unknown schedule '", name, "'; expected gpipe, 1f1b or interleaved");
}

}  // namespace tessel::parallel::pipeline
