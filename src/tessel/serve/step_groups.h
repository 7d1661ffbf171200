// SPDX-License-Identifier: Apache-2.0
// Groups of requests for cross-step pipelining (vLLM's "virtual engines" under pipeline
// parallelism): the engine splits its requests into G groups, each with its own scheduler, and
// keeps one step of each group in flight, so that while the last stage computes one group's step
// the first stage computes another's. A group's next step depends only on its own samples; its
// sequences' KV blocks are their own (shared read-only at most, through the prefix cache).
#pragma once

#include <cstdint>
#include <span>

namespace tessel::serve {

// The group a new request joins: the one with the fewest unfinished sequences (as vLLM places a
// request on its least loaded virtual engine), the lowest index among equals, so that the groups'
// steps stay about the same size and the stages about equally busy.
int least_loaded_group(std::span<const int64_t> loads);

// Each group's sequence limit, max_seqs shared out so that all groups together run at most
// max_seqs (the first max_seqs % groups groups take one more; at least 1 each).
int64_t group_max_seqs(int64_t max_seqs, int64_t groups, int64_t group);

}  // namespace tessel::serve
