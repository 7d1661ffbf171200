// SPDX-License-Identifier: Apache-2.0
// Time spent inside blocking communicator calls, per axis label ("tp", "dp", ...), counted on the
// calling thread (one rank's thread in a thread world, the process in an MPI job). A blocking
// collective's time is communication the caller could not hide: the trainer reports the tp
// axis's share of a step from it (the all-reduces inside tensor-parallel layers).
#pragma once

#include <cstdint>
#include <string>

namespace tessel::dist {

// Adds `ns` nanoseconds to `label`'s total on this thread (Communicator's blocking calls do).
void add_blocking_time(const std::string& label, int64_t ns);
// This thread's total for `label` so far, in milliseconds (0 for a label never seen).
double blocking_ms(const std::string& label);

}  // namespace tessel::dist
