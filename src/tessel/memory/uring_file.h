// SPDX-License-Identifier: Apache-2.0
// UringFile: asynchronous direct I/O on one file through io_uring (Linux 5.1+, Debian's
// liburing). A read or write of a chunk is split into fixed-size requests so that up to `depth`
// are in flight at once, the queue depth an NVMe drive needs to reach its bandwidth; a ticket
// completes when all of its requests have. Requests beyond the depth wait in a backlog that the
// completion thread (owned here) submits as room frees, so starting a transfer never waits for
// the queue. Submission is serialised by a mutex; completions are reaped by that one thread,
// which liburing supports without locking the completion ring.
#pragma once

#include <liburing.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tessel::memory {

// The state of one read or write: requests still in flight and the first failure.
struct IoGroup {
  int remaining = 0;
  std::string error;  // empty while every request succeeded
};
using IoTicket = std::shared_ptr<IoGroup>;

class UringFile {
 public:
  // Takes ownership of `fd` (opened with or without O_DIRECT; `path` is for messages).
  UringFile(int fd, std::string path, unsigned depth, size_t block_bytes);
  ~UringFile();  // waits for every request in flight
  UringFile(const UringFile&) = delete;
  UringFile& operator=(const UringFile&) = delete;

  // Start a transfer of `nbytes` at file `offset`; the buffer must stay valid until wait().
  IoTicket read(void* buf, size_t nbytes, uint64_t offset);
  IoTicket write(const void* buf, size_t nbytes, uint64_t offset);
  // Blocks until every request of the ticket completed; throws an Error naming the file, the
  // offset and the system error when one failed or transferred fewer bytes.
  void wait(const IoTicket& ticket);
  bool done(const IoTicket& ticket);
  void wait_all();

  int fd() const { return fd_; }
  unsigned depth() const { return depth_; }
  size_t block_bytes() const { return block_bytes_; }

 private:
  struct Request;
  IoTicket submit(bool write, void* buf, size_t nbytes, uint64_t offset);
  void submit_backlog();  // with mutex_ held
  void reap_loop();

  int fd_;
  std::string path_;
  unsigned depth_;
  size_t block_bytes_;
  io_uring ring_{};
  std::mutex mutex_;
  std::condition_variable changed_;  // a request completed (in_flight_ or a ticket changed)
  unsigned in_flight_ = 0;
  std::deque<Request*> backlog_;  // requests waiting for room in the queue
  bool broken_ = false;           // the reaper saw the ring fail
  std::thread reaper_;
};

}  // namespace tessel::memory
