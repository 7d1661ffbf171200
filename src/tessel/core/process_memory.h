// SPDX-License-Identifier: Apache-2.0
// What the operating system counts against this process: its resident set now (VmRSS), the
// most it has held since it started (VmHWM) and its address space's peak (VmPeak), from
// /proc/self/status. Allocator counters say what
// tensors hold; these say what the machine gives the process, including mapped files, heap the
// allocator keeps after a free, libraries and thread stacks, which is what decides whether a run
// fits.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace tessel {

struct ProcessMemory {
  int64_t rss_bytes = 0;       // VmRSS; 0 where /proc is not available
  int64_t peak_rss_bytes = 0;  // VmHWM
  // VmPeak: the most address space the process has reserved, resident or not (what
  // `ulimit -v` caps; an allocation never written counts here and not in the resident set).
  int64_t peak_vm_bytes = 0;
};

ProcessMemory process_memory();

// The largest resident set seen while it runs: VmRSS read every `interval_ms` on a thread of its
// own (and at start and stop). VmHWM cannot say what an operation added once the process has
// peaked higher before it (a training step's gradients); resetting it would also change what
// outside tools report, so an operation measures its own peak this way. A copy of the state held
// for a while is seen; a spike shorter than the interval may not be.
class ResidentPeakSampler {
 public:
  explicit ResidentPeakSampler(int interval_ms = 5);
  ~ResidentPeakSampler();
  ResidentPeakSampler(const ResidentPeakSampler&) = delete;
  ResidentPeakSampler& operator=(const ResidentPeakSampler&) = delete;
  int64_t stop();  // the peak in bytes; later calls return the same

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  std::thread thread_;
};

// Returns the heap's free memory to the operating system (glibc's malloc_trim: free pages anywhere
// in the heap, not only at its top). The host allocator (tensor/allocator.cpp) keeps freed blocks
// below 1 GiB in the heap so that every training step reuses the last one's temporaries without
// page faults; the trainer calls it (through tensor/host_memory.h's release_free_host_memory)
// before and after each checkpoint save or load, so the resident set falls back to what is in use
// and the operation's record starts from it. An evaluation does not call it (the blocks it
// frees stay cached for the next step).
// docs/TRAINING.md (Memory) has the measurements.
void release_free_heap();

}  // namespace tessel
