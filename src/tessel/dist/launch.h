// SPDX-License-Identifier: Apache-2.0
// Which launcher started this process, from its environment: Open MPI's mpirun
// (OMPI_COMM_WORLD_*), a PMI launcher (PMI_RANK/PMI_SIZE), Slurm's srun (SLURM_PROCID/NTASKS/
// LOCALID) or torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), checked
// in that order; none of them means a world of one.
#pragma once

#include <functional>
#include <string>

namespace tessel::dist {

enum class Launcher { None, OpenMpi, Pmi, Slurm, Torchrun };

struct LaunchInfo {
  Launcher launcher = Launcher::None;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string master_addr;  // torchrun-style only
  int master_port = 0;

  // Launchers whose processes can join one MPI world (MPI_Init finds its peers).
  bool mpi_capable() const {
    return launcher == Launcher::OpenMpi || launcher == Launcher::Pmi ||
           launcher == Launcher::Slurm;
  }
  std::string describe() const;  // "mpirun rank 3 of 8 (local 3 of 8)"
};

std::string_view launcher_name(Launcher l);

using EnvLookup = std::function<const char*(const char*)>;

// Reads the variables through `env` (std::getenv by default). Malformed or inconsistent values
// (rank outside 0..size-1, a size below 1) throw Error naming the variable and its value.
LaunchInfo detect_launch(const EnvLookup& env = {});

}  // namespace tessel::dist
