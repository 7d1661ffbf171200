// SPDX-License-Identifier: Apache-2.0
// Multi-process check of the MPI backend, launched by CTest as `mpirun -np N` (N = 1, 2, 3, 4, 8):
// every collective on every dtype and odd count (one above the 4 MiB blocks the backend
// reduce-scatters pairwise), asynchronous overlap, and on 8 ranks the
// sub-communicators of a 2x2x2 mesh. Every rank prints what differed; all ranks agree on the exit
// code, so one failing rank fails the job.

#include "dist/common/collective_checks.h"
#include "tessel/dist/world.h"

using namespace tessel;
using namespace tessel::dist;

int main() {
  try {
    CommPtr world = init_world();
    testing::CheckLog log;
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
