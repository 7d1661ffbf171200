// SPDX-License-Identifier: Apache-2.0
#include "tessel/memory/chunk.h"

#include "tessel/core/error.h"

namespace tessel::memory {

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::Device:
      return "device";
    case Tier::Host:
      return "host";
    case Tier::Nvme:
      return "nvme";
    case Tier::None:
      return "none";
  }
  return "?";
}

const char* state_name(ChunkState state) {
  switch (state) {
    case ChunkState::Free:
      return "free";
    case ChunkState::Hold:
      return "hold";
    case ChunkState::Compute:
      return "compute";
    case ChunkState::HoldAfterForward:
      return "hold_after_forward";
    case ChunkState::HoldAfterBackward:
      return "hold_after_backward";
  }
  return "?";
}

void check_transition(int chunk, ChunkState from, ChunkState to) {
  using S = ChunkState;
  bool held = from == S::Hold || from == S::HoldAfterForward || from == S::HoldAfterBackward;
  bool legal = false;
  switch (to) {
    case S::Compute:  // an access: from anywhere (Free starts from zeros), nested in Compute
      legal = true;
      break;
    case S::Hold:
    case S::HoldAfterForward:
    case S::HoldAfterBackward:  // the end of an access
      legal = from == S::Compute;
      break;
    case S::Free:  // dropping live contents; never while an operator reads them
      legal = held || from == S::Free;
      break;
  }
  TESSEL_CHECK(legal, "chunk ", chunk, ": illegal state change ", state_name(from), " -> ",
               state_name(to));
}

}  // namespace tessel::memory
