// SPDX-License-Identifier: Apache-2.0
// Multi-process check of the tcp backend, started by tests/dist/torchrun_like.py with
// torchrun-style variables and no MPI (N = 1, 2, 3, 4): the shared collective and async checks,
// bitwise determinism of all_reduce (every rank's result equals the rank-ordered sum computed
// locally from every rank's regenerated input), a message of several MiB, and on 4 ranks the
// sub-communicators of a dp=2,tp=2 mesh. All ranks agree on the exit code, so one failing rank
// fails the job.
#include <cstring>

#include "dist/common/collective_checks.h"
#include "tessel/core/rng.h"
#include "tessel/dist/reduce.h"
#include "tessel/dist/world.h"

using namespace tessel;
using namespace tessel::dist;

namespace {

Tensor draws(int rank, int64_t count, DType dtype) {
  Generator g(uint64_t(1000 + rank));
  return randn({count}, DType::F32, &g).to(dtype);
}

void check_deterministic(Communicator& comm, testing::CheckLog& log) {
  const int64_t count = 1001;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      Tensor t = draws(comm.world_rank_of(comm.rank()), count, dtype);
      comm.all_reduce(t, op);
      std::vector<Tensor> inputs;
      std::vector<const void*> ptrs;
      for (int r = 0; r < comm.size(); ++r)
        inputs.push_back(draws(comm.world_rank_of(r), count, dtype));
      for (const Tensor& x : inputs) ptrs.push_back(x.data_ptr());
      Tensor expect = empty({count}, dtype);
      reduce_buffers(ptrs, expect.data_ptr(), count, dtype, op);
      log.expect(std::memcmp(t.data_ptr(), expect.data_ptr(), t.nbytes()) == 0,
                 "all_reduce(" + std::string(reduce_op_name(op)) + ") " +
                     std::string(dtype_name(dtype)) + " on '" + comm.label() +
                     "' is not bitwise the rank-ordered reduction");
    }
  }
}

void check_large(Communicator& comm, testing::CheckLog& log) {
  const int64_t count = (int64_t(1) << 21) + 3;  // 8 MiB of f32, not divisible by the rank count
  Tensor t = empty({count});
  float* p = t.data<float>();
  const int me = comm.rank(), n = comm.size();
  for (int64_t i = 0; i < count; ++i) p[i] = float((me + 1) * (i % 7));
  comm.all_reduce(t);
  int64_t wrong = 0;
  const float ranks_sum = float(n * (n + 1) / 2);
  for (int64_t i = 0; i < count; ++i) wrong += p[i] != ranks_sum * float(i % 7);
  log.expect(wrong == 0, "large all_reduce: " + std::to_string(wrong) + " wrong elements");
}

}  // namespace

int main() {
  try {
    CommPtr world = init_world();
    testing::CheckLog log;
    log.expect(world->backend() == "tcp",
               "backend is " + std::string(world->backend()) + ", expected tcp");
    testing::check_collectives(*world, log);
    testing::check_async(*world, log);
    check_deterministic(*world, log);
    check_large(*world, log);
    if (world->size() == 4) {
      DeviceMesh mesh(world, "dp=2,tp=2");
      testing::check_mesh(mesh, log);
      testing::check_collectives(mesh.comm("tp"), log, {1, 33},
                                 {DType::F32, DType::BF16, DType::I64});
      testing::check_collectives(mesh.comm("dp"), log, {7}, {DType::F16, DType::I32});
      testing::check_async(mesh.comm("tp"), log);
      check_deterministic(mesh.comm("dp"), log);
    }
    return testing::agree_on_exit(*world, log);
  } catch (const std::exception& e) {
    abort_job(1, std::string("tcp collectives check: ") + e.what());
  }
}
