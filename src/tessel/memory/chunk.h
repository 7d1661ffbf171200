// SPDX-License-Identifier: Apache-2.0
// Chunk: a fixed-size block holding several tensors of one kind back to back, the unit that
// moves between tiers (PatrickStar, Fang et al. 2021). Moving whole chunks instead of single
// tensors keeps every transfer large enough to run at the link's bandwidth. The chunk's phase
// state says whether its bytes may move (not while held for compute) or be dropped (free).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/memory/uring_file.h"
#include "tessel/tensor/storage.h"

namespace tessel::memory {

enum class Tier : uint8_t { Device, Host, Nvme, None };
const char* tier_name(Tier tier);

// Free: the contents are dead (no bytes anywhere); the next access starts from zeros.
// Hold: live, not in use, movable. Compute: in use by an operator, pinned in its tier.
// HoldAfterForward / HoldAfterBackward: live and movable, last used by the named pass (what
// the policy and the optimizer read: gradients are complete after backward).
enum class ChunkState : uint8_t { Free, Hold, Compute, HoldAfterForward, HoldAfterBackward };
const char* state_name(ChunkState state);
// Throws an Error naming the chunk and both states when `from` -> `to` is not a legal move.
void check_transition(int chunk, ChunkState from, ChunkState to);

struct ChunkTensor {
  std::string name;
  size_t byte_offset = 0;
  size_t nbytes = 0;
};

struct Chunk {
  int id = 0;
  std::string group;  // the kind of tensor it holds: "param", "grad", "adam_m", ...
  size_t used_bytes = 0;
  std::vector<ChunkTensor> tensors;
  std::shared_ptr<Storage> storage;  // the bytes every tensor of the chunk views

  ChunkState state = ChunkState::Hold;
  int compute_refs = 0;    // nested accesses while in Compute
  Tier tier = Tier::None;  // where the bytes are (for a pending read: where they will be)
  int64_t nvme_slot = -1;
  bool nvme_valid = false;  // the NVMe slot holds the current contents
  // Writes of this chunk to NVMe so far (start-up's included): one per time its contents
  // changed (a ReadWrite access) and then left memory; a clean eviction writes nothing.
  int64_t nvme_writes = 0;

  // An NVMe transfer in flight: a read into `pending_buffer` (from `pending_tier`'s pool) or a
  // write from the storage's bytes.
  enum class Io : uint8_t { None, Reading, Writing } io = Io::None;
  IoTicket ticket;
  void* pending_buffer = nullptr;
  bool prefetched = false;  // read ahead of use and not accessed since
  bool moving = false;      // being brought into another tier: not an eviction candidate
};

}  // namespace tessel::memory
