// SPDX-License-Identifier: Apache-2.0
// Positional random draws: the numbers a layer draws are a pure function of the generator's seed,
// the step (its offset is `step << 32 | micro-batch`, set by the trainer), the drawing site (a
// stable id of the layer, from its module path) and each element's index in the tensor one process
// would draw for the step's rows (micro-batch m's rows follow m - 1's), never of what was drawn
// before or of how the rows are cut. So every layout (data-parallel rows, micro-batches, pipeline
// stages drawing only their layers, sequence pieces, recomputation) draws one process's numbers:
// layout-invariant dropout, as the counter-based generators of Salmon et al. (SC 2011) address.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "tessel/core/rng.h"

namespace tessel {

// How a layer draws positionally: its site, and which rows of the one-process tensor this
// process holds: part `part` of `parts` equal consecutive slices of dim 0 (its data-parallel
// rows; parts 1 without data parallelism).
struct PositionalDraw {
  uint64_t site = 0;
  int64_t part = 0;
  int64_t parts = 1;
};

// A stable 64-bit id of a site's name (FNV-1a), the same in every process.
uint64_t site_id(std::string_view name);

// The key of the stream a positional draw at `site` reads (as uniform_at's seed, from offset 0
// at the one-process index): Philox of (offset's step half, site) under the generator's seed, so
// distinct (step, site) pairs get independent streams. The generator does not move.
uint64_t positional_seed(const Generator& generator, uint64_t site);

// Where this process's n numbers of a positional draw read, as (seed, offset) of uniform_at: block
// b = micro-batch * parts + part of the step's (offset b * n; with n = 1, the offset is b).
std::array<uint64_t, 2> positional_stream(const Generator& generator, const PositionalDraw& draw,
                                          uint64_t n);

}  // namespace tessel
