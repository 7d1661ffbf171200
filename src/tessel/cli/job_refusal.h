// SPDX-License-Identifier: Apache-2.0
// One refusal for a multi-rank job: the checks of generate's and serve's --tp/--pp/--ep requests
// (the arguments, the model's plan) fail alike on every rank, and the job should print one line,
// not one per rank. Rank 0 rethrows (the CLI prints it and exits non-zero, which ends the job
// under mpirun); every other rank waits on a barrier rank 0 never joins.
#pragma once

#include <functional>

#include "tessel/core/error.h"
#include "tessel/dist/communicator.h"

namespace tessel::cli {

// Runs `check`; when it throws an Error, ranks other than 0 of `world` block for good and rank 0
// rethrows. A null `world` (one process) rethrows at once.
inline void check_on_every_rank(const dist::CommPtr& world, const std::function<void()>& check) {
  try {
    check();
  } catch (const Error&) {
    if (world && world->rank() != 0) world->barrier();  // never completes: rank 0 ends the job
    throw;
  }
}

}  // namespace tessel::cli
