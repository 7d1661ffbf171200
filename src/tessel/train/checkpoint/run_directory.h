// SPDX-License-Identifier: Apache-2.0
// A run directory belongs to one run. RunLock holds an exclusive lock on `run_dir/run.lock` for
// the life of a run (one clear error naming the holder's pid and host when another run has it; a
// lock left by a process that died is reclaimed), and proves at start that the directory can be
// written at all, so an unwritable directory is found before the first step, not at the first
// checkpoint. check_free_space compares the filesystem's free bytes with what the next
// checkpoint will need.
#pragma once

#include <cstdint>
#include <string>

namespace tessel::train {

inline constexpr const char* kRunLockFile = "run.lock";

class RunLock {
 public:
  // Creates `run_dir` if needed and takes its lock; an Error (with the operating system's reason)
  // when the directory cannot be created or written, or when a live process holds the lock.
  explicit RunLock(const std::string& run_dir);
  // Releases the lock: the file is emptied (an empty lock file is one released cleanly) but not
  // deleted, since deleting it would let a third run lock a different file than a second one.
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }
  // "pid 123 on host h (started ...)" when the previous holder died without releasing the lock
  // (a crash, kill -9, a lost machine); "" otherwise.
  const std::string& reclaimed_from() const { return reclaimed_from_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string reclaimed_from_;
};

// The lock file's holder as "pid 123 on host h (started ...)"; "" when the file is empty or absent.
std::string run_lock_holder(const std::string& run_dir);

// Bytes available to this user on the filesystem holding `dir` (statvfs f_bavail).
uint64_t free_bytes(const std::string& dir);

// An Error when the filesystem of `dir` has fewer than `needed` bytes free; `what` says what the
// bytes are for ("the next checkpoint (16 bytes per parameter x 11478336 parameters)").
void check_free_space(const std::string& dir, uint64_t needed, const std::string& what);

}  // namespace tessel::train
