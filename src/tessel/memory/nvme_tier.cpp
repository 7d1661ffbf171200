// SPDX-License-Identifier: Apache-2.0
#include "tessel/memory/nvme_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tessel/core/error.h"
#include "tessel/memory/memory_config.h"

namespace tessel::memory {

namespace {

std::string errno_text(int err) {
  return std::string(strerror(err));
}

size_t free_bytes(const std::string& dir) {
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) return 0;
  return size_t(st.f_bavail) * st.f_frsize;
}

// Writes one aligned block through `fd` and reads it back: the check that direct I/O works on
// this filesystem, not just that open() accepted the flag.
bool round_trip_block(int fd, std::string* error) {
  void* buf = std::aligned_alloc(kIoAlignment, kIoAlignment);
  std::memset(buf, 0x5a, kIoAlignment);
  bool ok = pwrite(fd, buf, kIoAlignment, 0) == ssize_t(kIoAlignment);
  int err = errno;
  if (ok) {
    std::memset(buf, 0, kIoAlignment);
    ok = pread(fd, buf, kIoAlignment, 0) == ssize_t(kIoAlignment) &&
         static_cast<unsigned char*>(buf)[kIoAlignment - 1] == 0x5a;
    err = errno;
  }
  std::free(buf);
  if (!ok) *error = errno_text(err);
  return ok;
}

}  // namespace

int open_for_direct_io(const std::string& path, bool* direct, std::string* reason) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    *direct = true;
    return fd;
  }
  int err = errno;
  TESSEL_CHECK(err == EINVAL || err == EOPNOTSUPP, "cannot create ", path, ": ", errno_text(err));
  *direct = false;
  *reason = "the filesystem refused O_DIRECT (open: " + errno_text(err) + ")";
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  TESSEL_CHECK(fd >= 0, "cannot create ", path, ": ", errno_text(errno));
  return fd;
}

NvmeTier::NvmeTier(std::string dir, size_t slot_bytes, unsigned depth, size_t block_bytes)
    : dir_(std::move(dir)), slot_bytes_(slot_bytes), depth_(depth), block_bytes_(block_bytes) {
  TESSEL_CHECK(slot_bytes_ % kIoAlignment == 0, "NVMe slot of ", slot_bytes_,
               " bytes is not a multiple of ", kIoAlignment);
  TESSEL_CHECK(block_bytes_ % kIoAlignment == 0, "memory.io_block_bytes ", block_bytes_,
               " is not a multiple of ", kIoAlignment);
  struct stat st {};
  TESSEL_CHECK(::stat(dir_.c_str(), &st) == 0, "memory.nvme_dir ", dir_,
               " cannot be used: ", errno_text(errno));
  TESSEL_CHECK(S_ISDIR(st.st_mode), "memory.nvme_dir ", dir_, " is not a directory");
  std::string probe = dir_ + "/.tessel-nvme-probe-" + std::to_string(::getpid());
  int fd = -1;
  try {
    fd = open_for_direct_io(probe, &direct_, &fallback_reason_);
  } catch (const Error& e) {
    TESSEL_FAIL("memory.nvme_dir ", dir_, " is not writable: ", e.what());
  }
  ::unlink(probe.c_str());
  int rc = posix_fallocate(fd, 0, off_t(kIoAlignment));
  std::string error;
  bool ok = rc == 0 && round_trip_block(fd, &error);
  if (rc != 0) error = "fallocate: " + errno_text(rc);
  if (!ok && direct_ && rc == 0) {
    // open() took O_DIRECT but the transfer did not: retry buffered and record why.
    ::close(fd);
    fd = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    direct_ = false;
    fallback_reason_ = "the filesystem refused an O_DIRECT transfer (" + error + ")";
    ok = fd >= 0 && round_trip_block(fd, &error);
  }
  if (fd >= 0) ::close(fd);
  TESSEL_CHECK(ok, "memory.nvme_dir ", dir_, " is not usable: ", error, " (", free_bytes(dir_),
               " bytes free)");
}

NvmeTier::~NvmeTier() = default;

void NvmeTier::reserve(size_t slots) {
  TESSEL_CHECK(!file_, "the NVMe tier in ", dir_, " is already reserved");
  std::string path = dir_ + "/.tessel-swap-" + std::to_string(::getpid());
  bool direct = false;
  std::string reason;
  int fd = open_for_direct_io(path, &direct, &reason);
  ::unlink(path.c_str());
  if (!direct) {
    direct_ = false;
    if (fallback_reason_.empty()) fallback_reason_ = reason;
  } else if (!direct_) {
    // The probe found O_DIRECT transfers failing although open() accepts the flag.
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_DIRECT);
  }
  size_t bytes = slots * slot_bytes_;
  // Checked before fallocate, which on some filesystems fills the disk before it gives up.
  size_t free = free_bytes(dir_);
  if (bytes > free) {
    ::close(fd);
    TESSEL_FAIL("memory.nvme_dir ", dir_, ": cannot reserve ", bytes, " bytes (", slots,
                " chunks of ", slot_bytes_, ") for the NVMe tier: only ", free, " bytes are free");
  }
  if (bytes > 0) {
    int rc = posix_fallocate(fd, 0, off_t(bytes));
    if (rc != 0) {
      ::close(fd);
      TESSEL_FAIL("memory.nvme_dir ", dir_, ": cannot reserve ", bytes, " bytes (", slots,
                  " chunks of ", slot_bytes_, ") for the NVMe tier: ", errno_text(rc), " (",
                  free_bytes(dir_), " bytes free)");
    }
  }
  file_ = std::make_unique<UringFile>(fd, dir_ + " (NVMe tier)", depth_, block_bytes_);
  free_.clear();
  for (size_t s = slots; s > 0; --s) free_.push_back(int64_t(s - 1));
  used_ = 0;
}

size_t NvmeTier::file_bytes() const {
  if (!file_) return 0;
  struct stat st {};
  TESSEL_CHECK(::fstat(file_->fd(), &st) == 0, "NVMe tier in ", dir_,
               ": fstat: ", errno_text(errno));
  return size_t(st.st_size);
}

int64_t NvmeTier::allocate_slot() {
  if (free_.empty()) return -1;
  int64_t slot = free_.back();
  free_.pop_back();
  ++used_;
  return slot;
}

void NvmeTier::free_slot(int64_t slot) {
  TESSEL_CHECK(slot >= 0 && size_t(slot) < slots() && used_ > 0, "NVMe slot ", slot,
               " is not in use (", slots(), " slots)");
  free_.push_back(slot);
  --used_;
}

IoTicket NvmeTier::read(int64_t slot, void* buf) {
  TESSEL_CHECK(file_, "the NVMe tier in ", dir_, " has no reserved space");
  return file_->read(buf, slot_bytes_, uint64_t(slot) * slot_bytes_);
}

IoTicket NvmeTier::write(int64_t slot, const void* buf) {
  TESSEL_CHECK(file_, "the NVMe tier in ", dir_, " has no reserved space");
  return file_->write(buf, slot_bytes_, uint64_t(slot) * slot_bytes_);
}

}  // namespace tessel::memory
