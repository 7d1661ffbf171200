// SPDX-License-Identifier: Apache-2.0
// Checks that the NCCL backend is compiled in exactly when the build says so (argument ON/OFF),
// and that on a machine without a usable GPU its bootstrap fails with a clear Error, not a crash.
#include <cstdio>
#include <string>

#include "tessel/dist/nccl/nccl.h"
#include "tessel/dist/world.h"

using namespace tessel;
using namespace tessel::dist;

int main(int argc, char** argv) {
  const bool expected = argc > 1 && std::string(argv[1]) == "ON";
  if (nccl_compiled_in() != expected) {
    std::fprintf(stderr, "nccl_compiled_in() is %d but the build has TESSEL_CUDA=%s\n",
                 int(nccl_compiled_in()), argc > 1 ? argv[1] : "?");
    return 1;
  }
  CommPtr world = init_world();
  try {
    CommPtr nccl = make_nccl_communicator(*world);
    std::printf("nccl communicator '%s' created on %s\n", nccl->label().c_str(),
                nccl->device().str().c_str());
    Tensor t = ones({7});
    try {
      nccl->all_reduce(t);  // a CPU tensor on a CUDA communicator
      std::fprintf(stderr, "a CPU tensor was accepted by the NCCL communicator\n");
      return 1;
    } catch (const Error& e) {
      std::printf("refused as expected: %s\n", e.what());
    }
  } catch (const Error& e) {
    std::printf("nccl unavailable here: %s\n", e.what());
  }
  return 0;
}
