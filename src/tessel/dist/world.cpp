// SPDX-License-Identifier: Apache-2.0
// Backend selection at start-up (MPI under an MPI launcher, tcp for torchrun-style variables, a
// world of one otherwise) and the consistency check between launcher and MPI.
#include "tessel/dist/world.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "tessel/core/log.h"
#include "tessel/dist/mpi/mpi_communicator.h"
#include "tessel/dist/tcp/tcp_world.h"
#include "tessel/dist/threads/thread_world.h"

namespace tessel::dist {

namespace {

struct WorldHolder {
  std::mutex mutex;
  CommPtr world;
  LaunchInfo launch;
};

WorldHolder& holder() {
  static WorldHolder* h = new WorldHolder();  // outlives statics that still hold communicators
  return *h;
}

}  // namespace

CommPtr init_world() {
  WorldHolder& h = holder();
  std::lock_guard lock(h.mutex);
  if (h.world) return h.world;
  LaunchInfo info = detect_launch();
  CommPtr world;
  if (info.mpi_capable()) {
    world = MpiCommunicator::create_world();
    TESSEL_CHECK(
        world->size() == info.size && world->rank() == info.rank,
        "launch: ", launcher_name(info.launcher), " announced rank ", info.rank, " of ", info.size,
        " but MPI sees rank ", world->rank(), " of ", world->size(),
        (info.launcher == Launcher::Slurm ? "; under Slurm, MPI needs PMIx: srun --mpi=pmix"
                                          : "; the MPI library does not match the launcher"));
  } else if (info.launcher == Launcher::Torchrun &&
             (info.size > 1 || (!info.master_addr.empty() && info.master_port > 0))) {
    // No MPI launcher: the processes meet at MASTER_ADDR:MASTER_PORT (a world of one without
    // them stays in-process, as a program started by hand).
    world = tcp::create_world(info);
  } else {
    world = ThreadWorld::single(process_context_ptr());
  }
  log(LogLevel::Debug, "dist: ", info.describe(), ", backend ", world->backend(), ", world rank ",
      world->rank(), " of ", world->size());
  h.world = world;
  h.launch = info;
  return world;
}

const LaunchInfo& launch_info() {
  return holder().launch;
}

void shutdown() {
  WorldHolder& h = holder();
  {
    std::lock_guard lock(h.mutex);
    h.world.reset();
  }
  tcp::finalize();
  mpi::finalize();
}

void abort_job(int exit_code, const std::string& message) {
  log_message(LogLevel::Error, message);
  std::fflush(stderr);
  if (mpi::is_active()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  if (tcp::is_active()) tcp::abort_peers(exit_code);
  std::_Exit(exit_code);
}

}  // namespace tessel::dist
