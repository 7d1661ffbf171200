// SPDX-License-Identifier: Apache-2.0
// The NCCL entry points of a build without CUDA.
#include "tessel/dist/nccl/nccl.h"

namespace tessel::dist {

bool nccl_compiled_in() {
  return false;
}

CommPtr make_nccl_communicator(Communicator& bootstrap, int) {
  TESSEL_FAIL(
      "nccl: this build of tessel has no CUDA support (configure with -DTESSEL_CUDA=ON on a "
      "machine with the CUDA toolkit and NCCL); communicator '",
      bootstrap.label(), "' stays on the CPU");
}

}  // namespace tessel::dist
