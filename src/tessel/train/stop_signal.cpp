// SPDX-License-Identifier: Apache-2.0
// Signal handlers that only store to a lock-free atomic (async-signal-safe).
#include "tessel/train/stop_signal.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "tessel/dist/launch.h"

namespace tessel::train {

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
  // The next Ctrl-C is not caught: an impatient user can always end the process.
  if (sig == SIGINT) std::signal(SIGINT, SIG_DFL);
}

}  // namespace

void install_stop_handlers() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

void remove_stop_handlers() {
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGUSR1, SIG_DFL);
}

bool stop_requested() {
  return g_signal.load() != 0;
}
int stop_signal() {
  return g_signal.load();
}
void request_stop(int sig) {
  g_signal.store(sig);
}

std::string signal_name(int sig) {
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGUSR1) return "SIGUSR1";
  return "signal " + std::to_string(sig);
}

GracePeriod launcher_grace_period() {
  GracePeriod g;
  dist::LaunchInfo launch;
  try {
    launch = dist::detect_launch();
  } catch (const std::exception&) {
    return g;  // malformed launch variables are reported where the world is built
  }
  switch (launch.launcher) {
    case dist::Launcher::OpenMpi: {
      // mpirun passes its MCA settings to the ranks in the environment (from --mca too).
      g.launcher = "mpirun";
      g.seconds = 1;
      if (const char* v = std::getenv("OMPI_MCA_odls_base_sigkill_timeout")) {
        char* end = nullptr;
        const double s = std::strtod(v, &end);
        if (end != v && s >= 0) g.seconds = s;
      }
      g.how_to_raise =
          "stop the job with SIGUSR1 to mpirun (passed on at once, no deadline), or start mpirun "
          "with --mca odls_base_sigkill_timeout SECONDS";
      break;
    }
    case dist::Launcher::Slurm:
      g.launcher = "srun";
      g.seconds = 30;
      g.how_to_raise =
          "Slurm's KillWait (scontrol show config) is the grace after scancel; ask for the signal "
          "before the time limit with sbatch --signal=TERM@SECONDS";
      break;
    case dist::Launcher::Torchrun:
      g.launcher = "torchrun";
      g.seconds = 30;
      g.how_to_raise = "torchrun's grace is fixed; save more often (checkpoint.interval)";
      break;
    case dist::Launcher::Pmi:  // MPICH's mpiexec and others: no documented grace to report
    case dist::Launcher::None:
      break;
  }
  return g;
}

}  // namespace tessel::train
