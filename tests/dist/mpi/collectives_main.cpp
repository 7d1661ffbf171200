// SPDX-License-Identifier: Apache-2.0
// Multi-process check of the MPI backend, launched by CTest as `mpirun -np N` (N = 1, 2, 3, 4, 8):
// every collective on every dtype and odd count (one above the 4 MiB blocks the backend
// reduce-scatters pairwise), asynchronous overlap, and on 8 ranks the
// sub-communicators of a 2x2x2 mesh; and that Open MPI yields while a wait is idle (the runtime's
// default, so that a progress lane's wait does not take a core from compute). Every rank prints
// what differed; all ranks agree on the exit code, so one failing rank fails the job.

#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "dist/common/collective_checks.h"
#include "tessel/dist/world.h"

using namespace tessel;
using namespace tessel::dist;

namespace {

// mpi_yield_when_idle as the library holds it (read through MPI_T), or -1 if it has no such
// variable (another MPI).
int yield_when_idle() {
  int provided = 0, index = 0, count = 0, value = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return -1;
  if (MPI_T_cvar_get_index("mpi_yield_when_idle", &index) == MPI_SUCCESS) {
    MPI_T_cvar_handle handle;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      MPI_T_cvar_read(handle, &value);  // a bool: its one byte lands in value's low byte
      MPI_T_cvar_handle_free(&handle);
    } else {
      value = -1;
    }
  } else {
    value = -1;
  }
  MPI_T_finalize();
  return value;
}

// CTest sets no MCA parameter, so the runtime's default must be in the environment and in effect
// (a user's own value would be kept and read back the same).
void check_yield(testing::CheckLog& log) {
  const char* env = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  log.expect(env != nullptr, "OMPI_MCA_mpi_yield_when_idle is set before MPI_Init");
  const int value = yield_when_idle();
  if (value < 0 || env == nullptr) return;
  const bool want = std::strcmp(env, "0") != 0 && std::strcmp(env, "false") != 0;
  log.expect((value != 0) == want, "mpi_yield_when_idle reads " + std::to_string(value) +
                                       " with OMPI_MCA_mpi_yield_when_idle=" + env);
}

}  // namespace

int main() {
  try {
    CommPtr world = init_world();
    testing::CheckLog log;
    if (world->backend() == "mpi") check_yield(log);  // the same program runs over TCP too
    testing::check_collectives(*world, log);
    testing::check_async(*world, log);
    // Blocks above 4 MiB: the MPI backend reduce-scatters them pairwise, a 4 MiB chunk at a time.
    testing::check_collectives(*world, log, {(int64_t(1) << 20) + 7}, {DType::F32});
    if (world->size() == 8) {
      DeviceMesh mesh(world, "dp=2,pp=2,tp=2");
      testing::check_mesh(mesh, log);
      testing::check_collectives(mesh.comm("tp"), log, {1, 33},
                                 {DType::F32, DType::BF16, DType::I64});
      testing::check_collectives(mesh.comm("dp+pp"), log, {7}, {DType::F16, DType::I32});
      testing::check_async(mesh.comm("pp"), log);
    }
    return testing::agree_on_exit(*world, log);
  } catch (const std::exception& e) {
    abort_job(1, std::string("collectives check: ") + e.what());
  }
}
