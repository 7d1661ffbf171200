// SPDX-License-Identifier: Apache-2.0
// NvmeTier: the slowest tier, one preallocated swap file in a directory (memory.nvme_dir) cut
// into chunk-sized slots, read and written asynchronously with io_uring and O_DIRECT, as
// ZeRO-Infinity offloads to NVMe. The directory is probed and the whole file reserved with
// fallocate when the tier opens, so a full disk or an unwritable directory is one clear error
// before training starts, never a failed write in the middle of a step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/memory/uring_file.h"

namespace tessel::memory {

class NvmeTier {
 public:
  // Probes `dir` (exists, is a directory, a test file can be created, fallocated, written and
  // read back with O_DIRECT) and throws one Error naming the directory and the system error
  // otherwise. Reserves nothing yet.
  NvmeTier(std::string dir, size_t slot_bytes, unsigned depth, size_t block_bytes);
  ~NvmeTier();

  // Creates the swap file (unlinked at once, so nothing is left behind after a crash) and
  // fallocates `slots` slots; throws naming the bytes wanted and free when the disk is full.
  void reserve(size_t slots);
  // The swap file's size as the filesystem reports it (0 before reserve()).
  size_t file_bytes() const;

  size_t slots() const { return free_.size() + used_; }
  size_t slots_in_use() const { return used_; }
  size_t slot_bytes() const { return slot_bytes_; }
  int64_t allocate_slot();  // -1 when every slot is taken
  void free_slot(int64_t slot);

  IoTicket read(int64_t slot, void* buf);
  IoTicket write(int64_t slot, const void* buf);
  void wait(const IoTicket& ticket) { file_->wait(ticket); }
  bool done(const IoTicket& ticket) { return file_->done(ticket); }
  void wait_all() {
    if (file_) file_->wait_all();
  }

  // True when the filesystem took O_DIRECT; otherwise the reason it refused it (buffered I/O
  // through the page cache is used instead, see docs/MEMORY.md).
  bool direct() const { return direct_; }
  const std::string& fallback_reason() const { return fallback_reason_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  size_t slot_bytes_;
  unsigned depth_;
  size_t block_bytes_;
  bool direct_ = true;
  std::string fallback_reason_;
  std::unique_ptr<UringFile> file_;
  std::vector<int64_t> free_;  // free slots, lowest last
  size_t used_ = 0;
};

// Opens (creating) `path` for direct I/O; when the filesystem refuses O_DIRECT (tmpfs, some
// network and overlay filesystems) opens it buffered and sets `reason` to why. Throws on any
// other failure, naming the path and the system error.
int open_for_direct_io(const std::string& path, bool* direct, std::string* reason);

}  // namespace tessel::memory
