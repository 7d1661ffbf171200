// SPDX-License-Identifier: Apache-2.0
// The world of this process: MPI when a launcher MPI understands started it (mpirun, srun, a PMI
// launcher), tcp for a torchrun-style launch, a world of one otherwise. Created once, on first use;
// MPI is finalised at exit.
#pragma once

#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/dist/launch.h"

namespace tessel::dist {

// Detects the launcher, starts the backend and the watchdog, and checks that MPI sees the world the
// launcher announced. Torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) without
// an MPI launcher start the tcp backend: rank 0 serves a rendezvous store at
// MASTER_ADDR:MASTER_PORT. Thread-safe; later calls return the same world.
CommPtr init_world();
const LaunchInfo& launch_info();  // after init_world()

// Ends the runtime before exit (optional): stops the watchdog, closes the tcp mesh, and finalises
// MPI if tessel initialised it. Every rank must call it; communicators must not be used afterwards.
void shutdown();

// Ends every rank of the job with exit_code after printing `message` once on this rank (MPI_Abort,
// or abort frames to every tcp peer, in a multi-process world; exit otherwise). For errors a single
// rank detects.
[[noreturn]] void abort_job(int exit_code, const std::string& message);

}  // namespace tessel::dist
