// SPDX-License-Identifier: Apache-2.0
// Backend selection at start-up and the consistency check between launcher and MPI.
#include "tessel/dist/world.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "tessel/core/log.h"
#include "tessel/dist/mpi/mpi_communicator.h"
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
  TESSEL_CHECK(info.launcher != Launcher::Torchrun || info.size == 1,
               "launch: torchrun-style variables give RANK=", info.rank,
               " of WORLD_SIZE=", info.size,
               " but no MPI launcher started this process; tessel's processes find each other "
               "through MPI: start them with `mpirun -np ",
               info.size, "` or `srun --mpi=pmix -n ", info.size,
               "` (a rendezvous at MASTER_ADDR:MASTER_PORT is not implemented)");
  CommPtr world;
  if (info.mpi_capable()) {
    world = MpiCommunicator::create_world();
    TESSEL_CHECK(
        world->size() == info.size && world->rank() == info.rank,
        "launch: ", launcher_name(info.launcher), " announced rank ", info.rank, " of ", info.size,
        " but MPI sees rank ", world->rank(), " of ", world->size(),
        (info.launcher == Launcher::Slurm ? "; under Slurm, MPI needs PMIx: srun --mpi=pmix"
                                          : "; the MPI library does not match the launcher"));
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
  mpi::finalize();
}

void abort_job(int exit_code, const std::string& message) {
  log_message(LogLevel::Error, message);
  std::fflush(stderr);
  if (mpi::is_active()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace tessel::dist
