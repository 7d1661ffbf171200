// SPDX-License-Identifier: Apache-2.0
// Graceful stop: SIGTERM (what Slurm and schedulers send before a kill), SIGINT (Ctrl-C) and
// SIGUSR1 set a flag that the training loop reads between steps, so the run saves a checkpoint
// and exits cleanly. A second SIGINT is not caught: it ends the process at once. SIGUSR1 is the
// stop to send to mpirun: Open MPI passes it to every rank at once and waits for them, where a
// SIGTERM to mpirun reaches the ranks only after odls_base_sigkill_timeout seconds and is followed
// by SIGKILL as long again later. launcher_grace_period() says how long a launcher waits between
// its SIGTERM and its SIGKILL, as far as a rank can know, so a save that takes longer is reported
// while there is still time to fix it.
#pragma once

#include <string>

namespace tessel::train {

// Installs the handlers (idempotent) and clears the flag.
void install_stop_handlers();
// Restores the default dispositions.
void remove_stop_handlers();
bool stop_requested();
int stop_signal();  // the signal received, 0 if none
// For tests: behave as if `sig` had arrived.
void request_stop(int sig);
// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
std::string signal_name(int sig);

struct GracePeriod {
  std::string launcher;      // "mpirun", "srun", "torchrun"; "" for a process started by hand
  double seconds = 0;        // between the launcher's SIGTERM and its SIGKILL; 0: no launcher
  std::string how_to_raise;  // the setting that lengthens it
};
// The grace period of the launcher that started this process: Open MPI's
// odls_base_sigkill_timeout (OMPI_MCA_odls_base_sigkill_timeout, default 1 s), Slurm's KillWait
// (site-configured, 30 s by default), torchrun's 30 s.
GracePeriod launcher_grace_period();

}  // namespace tessel::train
