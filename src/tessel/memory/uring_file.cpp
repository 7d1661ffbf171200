// SPDX-License-Identifier: Apache-2.0
#include "tessel/memory/uring_file.h"

#include <unistd.h>

#include <cstring>

#include "tessel/core/error.h"

namespace tessel::memory {

struct UringFile::Request {
  IoTicket ticket;
  bool write;
  void* buf;
  uint64_t offset;
  uint32_t nbytes;
};

namespace {
// user_data of the no-op that tells the reaper to stop (no request pointer is 0).
constexpr uint64_t kStopTag = 0;
}  // namespace

UringFile::UringFile(int fd, std::string path, unsigned depth, size_t block_bytes)
    : fd_(fd), path_(std::move(path)), depth_(depth), block_bytes_(block_bytes) {
  TESSEL_CHECK(depth_ >= 1 && block_bytes_ >= 1 && block_bytes_ <= (size_t(1) << 30),
               "io_uring on ", path_, ": depth ", depth_, " and block ", block_bytes_,
               " bytes must be >= 1 (block <= 1 GiB)");
  // One extra entry for the stop no-op; the completion queue (twice the size) cannot overflow
  // because at most depth_ + 1 entries are ever in flight.
  int rc = io_uring_queue_init(depth_ + 1, &ring_, 0);
  if (rc < 0) {
    ::close(fd_);
    TESSEL_FAIL("io_uring_queue_init(", depth_ + 1, ") for ", path_, " failed: ", strerror(-rc));
  }
  reaper_ = std::thread([this] { reap_loop(); });
}

UringFile::~UringFile() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return (in_flight_ == 0 && backlog_.empty()) || broken_; });
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, kStopTag);
    io_uring_submit(&ring_);
  }
  reaper_.join();
  io_uring_queue_exit(&ring_);
  ::close(fd_);
}

IoTicket UringFile::read(void* buf, size_t nbytes, uint64_t offset) {
  return submit(false, buf, nbytes, offset);
}

IoTicket UringFile::write(const void* buf, size_t nbytes, uint64_t offset) {
  return submit(true, const_cast<void*>(buf), nbytes, offset);
}

IoTicket UringFile::submit(bool write, void* buf, size_t nbytes, uint64_t offset) {
  auto ticket = std::make_shared<IoGroup>();
  size_t blocks = (nbytes + block_bytes_ - 1) / block_bytes_;
  std::lock_guard lock(mutex_);
  TESSEL_CHECK(!broken_, "io_uring of ", path_, " stopped working");
  ticket->remaining = int(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    size_t begin = b * block_bytes_;
    size_t len = std::min(block_bytes_, nbytes - begin);
    backlog_.push_back(
        new Request{ticket, write, static_cast<char*>(buf) + begin, offset + begin, uint32_t(len)});
  }
  submit_backlog();
  return ticket;
}

void UringFile::submit_backlog() {
  // Never more than depth_ in flight (so the submission queue always has room); the rest waits
  // here and the reaper submits it as completions free the queue, so a caller never blocks on
  // a full queue. Everything prepared goes to the kernel in one io_uring_enter.
  unsigned prepared = 0;
  while (!backlog_.empty() && in_flight_ < depth_) {
    Request* request = backlog_.front();
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    TESSEL_CHECK(sqe != nullptr, "io_uring submission queue of ", path_, " is full");
    backlog_.pop_front();
    if (request->write) {
      io_uring_prep_write(sqe, fd_, request->buf, request->nbytes, request->offset);
    } else {
      io_uring_prep_read(sqe, fd_, request->buf, request->nbytes, request->offset);
    }
    io_uring_sqe_set_data(sqe, request);
    ++in_flight_;
    ++prepared;
  }
  if (prepared == 0) return;
  int rc = io_uring_submit(&ring_);
  TESSEL_CHECK(rc >= 0, "io_uring_submit on ", path_, " failed: ", strerror(-rc));
}

void UringFile::reap_loop() {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) {
      // The ring itself broke: fail every waiter rather than hang them.
      std::lock_guard lock(mutex_);
      broken_ = true;
      changed_.notify_all();
      return;
    }
    uint64_t tag = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (tag == kStopTag) return;
    std::unique_ptr<Request> request(reinterpret_cast<Request*>(tag));
    std::lock_guard lock(mutex_);
    IoGroup& group = *request->ticket;
    if (group.error.empty() && (res < 0 || uint32_t(res) != request->nbytes)) {
      group.error = detail::concat(
          request->write ? "write" : "read", " of ", request->nbytes, " bytes at offset ",
          request->offset, " of ", path_, " failed: ",
          res < 0 ? std::string(strerror(-res)) : "transferred " + std::to_string(res) + " bytes");
    }
    --group.remaining;
    --in_flight_;
    try {
      submit_backlog();
    } catch (const Error&) {
      broken_ = true;  // waiters fail with "stopped working" instead of hanging
    }
    changed_.notify_all();
  }
}

void UringFile::wait(const IoTicket& ticket) {
  if (!ticket) return;
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return ticket->remaining == 0 || broken_; });
  TESSEL_CHECK(ticket->remaining == 0, "io_uring of ", path_, " stopped working");
  TESSEL_CHECK(ticket->error.empty(), ticket->error);
}

bool UringFile::done(const IoTicket& ticket) {
  if (!ticket) return true;
  std::lock_guard lock(mutex_);
  return ticket->remaining == 0;
}

void UringFile::wait_all() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return (in_flight_ == 0 && backlog_.empty()) || broken_; });
}

}  // namespace tessel::memory
