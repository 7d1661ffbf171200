// SPDX-License-Identifier: Apache-2.0
// Fault injection under mpirun; CTest checks how the job ends (exit code and message):
//   skip      rank 1 skips the 4th all_reduce and sleeps: the watchdog names it
//   mismatch  on a dp=2,tp=2 mesh, world rank 1 enters a barrier where the others all-reduce on tp
//   recv      rank 0 waits for a second message rank 1 never sends
//   exit      rank 1 returns from main with an error status at the 4th all_reduce (as a program
//             does after reporting an error); the others learn it is waiting at shutdown
//   kill      rank 1 is killed (SIGKILL) while the others are in a collective
//   abort     rank 1 calls std::abort while the others are in a collective
//   mesh      a mesh whose product differs from the world size: refused before any work
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "tessel/dist/mesh.h"
#include "tessel/dist/world.h"

using namespace tessel;
using namespace tessel::dist;

namespace {

void sleep_s(int s) {
  std::this_thread::sleep_for(std::chrono::seconds(s));
}

int run(const std::string& mode) {
  CommPtr world = init_world();
  const int me = world->rank();
  Tensor t = ones({7});
  if (mode == "mesh") {
    try {
      DeviceMesh mesh(world, "dp=2,tp=2");
      std::printf("rank %d: mesh accepted, work starts\n", me);
      return 0;
    } catch (const Error& e) {
      std::fprintf(stderr, "rank %d refused: %s; calls issued before refusal: %llu\n", me, e.what(),
                   (unsigned long long)world->context().issued_count());
      return 3;
    }
  }
  if (mode == "mismatch") {
    DeviceMesh mesh(world, "dp=2,tp=2");
    mesh.comm("tp").all_reduce(t);
    if (me == 1) {
      mesh.comm("tp").barrier();
    } else {
      mesh.comm("tp").all_reduce(t);
    }
    return 0;
  }
  if (mode == "recv") {  // the second message never comes
    if (me == 1) world->send(t, 0, 9);
    if (me == 0) world->recv(t, 1, 9);
    if (me == 0) world->recv(t, 1, 9);
    if (me == 1) sleep_s(60);
    return 0;
  }
  for (int step = 1; step <= 6; ++step) {
    if (step == 4 && me == 1) {
      if (mode == "skip") sleep_s(60);
      if (mode == "exit") return 1;
      if (mode == "kill") std::raise(SIGKILL);
      if (mode == "abort") std::abort();
    }
    world->all_reduce(t);
  }
  std::printf("rank %d: finished without the fault\n", me);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s skip|mismatch|recv|exit|kill|abort|mesh\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const std::exception& e) {
    abort_job(1, std::string("faults: ") + e.what());
  }
}
