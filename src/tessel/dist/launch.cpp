// SPDX-License-Identifier: Apache-2.0
// Launcher detection from environment variables (names as each launcher documents them).
#include "tessel/dist/launch.h"

#include <cstdlib>
#include <optional>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel::dist {

namespace {

std::optional<int> read_int(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  TESSEL_CHECK(end != v && *end == '\0' && x >= 0 && x <= 1 << 24, "launch: ", name, "='", v,
               "' is not a valid non-negative integer");
  return int(x);
}

// rank/size (+ local) from one launcher's variables; nullopt when its rank variable is absent.
std::optional<LaunchInfo> from_vars(const EnvLookup& env, Launcher launcher, const char* rank,
                                    const char* size, const char* local_rank,
                                    const char* local_size) {
  std::optional<int> r = read_int(env, rank);
  if (!r) return std::nullopt;
  std::optional<int> n = read_int(env, size);
  TESSEL_CHECK(n.has_value(), "launch: ", rank, " is set but ", size, " is not");
  TESSEL_CHECK(*n >= 1 && *r < *n, "launch: ", rank, "=", *r, " must lie in 0..", size,
               "-1 = ", *n - 1);
  LaunchInfo info;
  info.launcher = launcher;
  info.rank = *r;
  info.size = *n;
  info.local_rank = local_rank ? read_int(env, local_rank).value_or(0) : 0;
  info.local_size = local_size ? read_int(env, local_size).value_or(1) : 1;
  return info;
}

}  // namespace

std::string_view launcher_name(Launcher l) {
  switch (l) {
    case Launcher::None:
      return "none";
    case Launcher::OpenMpi:
      return "mpirun";
    case Launcher::Pmi:
      return "pmi";
    case Launcher::Slurm:
      return "srun";
    case Launcher::Torchrun:
      return "torchrun";
  }
  return "?";
}

std::string LaunchInfo::describe() const {
  std::ostringstream out;
  out << launcher_name(launcher) << " rank " << rank << " of " << size << " (local " << local_rank
      << " of " << local_size << ")";
  if (!master_addr.empty()) out << ", master " << master_addr << ":" << master_port;
  return out.str();
}

LaunchInfo detect_launch(const EnvLookup& lookup) {
  EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) { return std::getenv(n); });
  if (auto i = from_vars(env, Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"))
    return *i;
  if (auto i = from_vars(env, Launcher::Pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", nullptr))
    return *i;
  if (auto i = from_vars(env, Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                         nullptr))  // SLURM_TASKS_PER_NODE has the form "4(x2)"
    return *i;
  if (auto i = from_vars(env, Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK",
                         "LOCAL_WORLD_SIZE")) {
    if (const char* a = env("MASTER_ADDR")) i->master_addr = a;
    i->master_port = read_int(env, "MASTER_PORT").value_or(0);
    TESSEL_CHECK(i->master_port <= 65535, "launch: MASTER_PORT=", i->master_port,
                 " is not a TCP port (1..65535)");
    return *i;
  }
  return LaunchInfo{};
}

}  // namespace tessel::dist
