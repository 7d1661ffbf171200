// SPDX-License-Identifier: Apache-2.0
// The world of a torchrun-style launch without MPI: rank 0 serves the rendezvous store at
// MASTER_ADDR:MASTER_PORT, every rank joins it, the full mesh is built through it, and the
// watchdog diagnoses over the mesh. At exit every rank waits for the others (as the MPI backend
// does), then the mesh says goodbye, so a connection closing without it means a rank died.
#pragma once

#include "tessel/dist/communicator.h"
#include "tessel/dist/launch.h"

namespace tessel::dist::tcp {

// Collective over the launch's ranks; the rendezvous waits TESSEL_COMM_FIRST_TIMEOUT at most.
CommPtr create_world(const LaunchInfo& launch);
// Exit barrier (watched by the watchdog), watchdog stop, mesh and store closed. Idempotent; runs
// at exit when the program does not call it.
void finalize();
bool is_active();
// Asks every peer to end its process with exit_code (an abort of the whole job); returns.
void abort_peers(int exit_code);

}  // namespace tessel::dist::tcp
