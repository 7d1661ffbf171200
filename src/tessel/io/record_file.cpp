// SPDX-License-Identifier: Apache-2.0
// Whole-record appends with the file cut back on a failed write.
#include "tessel/io/record_file.h"

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "tessel/core/error.h"

namespace tessel::io {

RecordFile::RecordFile(int fd, std::string path, std::string failure)
    : fd_(fd), path_(std::move(path)), failure_(std::move(failure)) {
  if (fd_ >= 0) {
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    size_ = end > 0 ? int64_t(end) : 0;
  }
}

RecordFile::~RecordFile() {
  close();
}

RecordFile::RecordFile(RecordFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      failure_(std::move(other.failure_)),
      size_(other.size_) {}

RecordFile& RecordFile::operator=(RecordFile&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    failure_ = std::move(other.failure_);
    size_ = other.size_;
  }
  return *this;
}

void RecordFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void RecordFile::append(std::string_view record) {
  if (fd_ < 0) return;
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n =
        ::pwrite(fd_, record.data() + done, record.size() - done, off_t(size_) + off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // 0 bytes from a regular file means no space either; report it as such.
      const int err = n < 0 ? errno : ENOSPC;
      // No torn record: the file ends with the last whole one (best effort: the failure may be
      // the very thing that stops the truncation too).
      if (done > 0 && ::ftruncate(fd_, off_t(size_)) != 0) {
      }
      TESSEL_FAIL(failure_, ": ", std::strerror(err), " after ", size_, " bytes");
    }
    done += size_t(n);
  }
  size_ += int64_t(record.size());
}

}  // namespace tessel::io
