// SPDX-License-Identifier: Apache-2.0
// What the host allocator (tensor/allocator.cpp) keeps beyond what tensors use, and handing it
// back. Large blocks are mappings of their own, cached after a free for the next request of their
// size (tensor/mapped_block_cache.h); small ones come from glibc's heap, which keeps freed memory.
// Both are reused by the next training step without page faults; the trainer hands them back
// before and after a checkpoint save or load (train/trainer_memory.cpp), so that the resident set
// falls to what is in use.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessel {

// Freed large blocks the host allocator keeps mapped (resident where they were written).
size_t host_cached_bytes();
// Large blocks mapped and remapped so far: each may page-fault its memory in.
int64_t host_block_maps();
// While one of these lives, the large-block cache sizes its spare on the blocks it sees cycle
// instead of 1/8 of its high-water mark alone (tensor/mapped_block_cache.h, "Following the
// cycle"): memory offload holds one while the training state lives in its tiers, outside this
// allocator. They nest.
class HostCycleFollowing {
 public:
  HostCycleFollowing();
  ~HostCycleFollowing();
  HostCycleFollowing(const HostCycleFollowing&) = delete;
  HostCycleFollowing& operator=(const HostCycleFollowing&) = delete;
};
// What the large-block cache may map beyond the most ever in use, now.
size_t host_spare_bytes();
// Unmaps the cached blocks and returns the heap's free pages (core/process_memory.h's
// release_free_heap).
void release_free_host_memory();

}  // namespace tessel
