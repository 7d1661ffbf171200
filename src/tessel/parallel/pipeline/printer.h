// SPDX-License-Identifier: Apache-2.0
// Drawing a simulated pipeline schedule: a text timeline for terminals and tests, and a Chrome
// trace (the JSON "Trace Event Format") to open in chrome://tracing or ui.perfetto.dev.
#pragma once

#include <string>

#include "tessel/parallel/pipeline/schedule.h"
#include "tessel/parallel/pipeline/simulator.h"

namespace tessel::parallel::pipeline {

// One row per rank, one cell per `unit` of simulated time, cells separated by a space. A cell
// shows the action running at its midpoint: "F3"/"B3" for a forward/backward of micro-batch 3
// (with v > 1 the rank's chunk follows as a letter: "F3a" chunk 0, "F3b" chunk 1), ">3"/"<3" for
// a send of an activation/gradient that takes time, dots when the rank is idle or waiting.
// Cells are padded to the widest label. Example, 1F1B with p=2, m=2, f=1, b=2:
//   rank 0: F0 F1 .. .. B0 B0 .. B1 B1
//   rank 1: .. F0 B0 B0 F1 B1 B1 .. ..
std::string text_timeline(const Schedule& schedule, const Simulation& simulation,
                          double unit = 1.0);

// traceEvents: per rank (pid = rank, named "rank r") one complete event (ph "X") per compute
// action, named like "F mb3 s1", with cat "forward"/"backward", and one per send that takes time
// (cat "send"). ts/dur are in microseconds: one time unit is `us_per_unit`.
std::string chrome_trace(const Schedule& schedule, const Simulation& simulation,
                         double us_per_unit = 1000.0);

}  // namespace tessel::parallel::pipeline
