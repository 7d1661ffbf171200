// SPDX-License-Identifier: Apache-2.0
// MemoryConfig: the budgets of the three tiers chunks live in (docs/MEMORY.md). The keys mirror
// the training configuration's memory.device_budget, memory.host_budget and memory.nvme_dir, so
// the trainer can fill this struct from its config file.
#pragma once

#include <cstddef>
#include <string>

namespace tessel::memory {

// Direct I/O wants buffers, offsets and lengths aligned to the logical block size; 4 KiB covers
// every NVMe and ext4/xfs setup in use, so chunks and tier buffers use it throughout.
inline constexpr size_t kIoAlignment = 4096;

struct MemoryConfig {
  size_t chunk_bytes = size_t(64) << 20;    // one chunk's payload (rounded up to kIoAlignment)
  size_t device_budget = 0;                 // bytes the device tier may hold (must hold >= 1 chunk)
  size_t host_budget = 0;                   // bytes the host tier may hold
  std::string nvme_dir;                     // empty: no NVMe tier
  size_t nvme_budget = 0;                   // 0: as many bytes as the chunks need
  size_t io_block_bytes = size_t(1) << 20;  // one io_uring request
  unsigned io_depth = 32;                   // requests in flight at most
};

}  // namespace tessel::memory
