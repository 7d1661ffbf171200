// SPDX-License-Identifier: Apache-2.0
// Graceful stop: SIGTERM (what Slurm and schedulers send before a kill) and SIGINT (Ctrl-C) set a
// flag that the training loop reads between steps, so the run saves a checkpoint and exits
// cleanly. A second SIGINT is not caught: it ends the process at once.
#pragma once

namespace tessel::train {

// Installs the handlers (idempotent) and clears the flag.
void install_stop_handlers();
// Restores the default dispositions.
void remove_stop_handlers();
bool stop_requested();
int stop_signal();  // the signal received, 0 if none
// For tests: behave as if `sig` had arrived.
void request_stop(int sig);

}  // namespace tessel::train
