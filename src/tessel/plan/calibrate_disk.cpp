// SPDX-License-Identifier: Apache-2.0
// The disk's sequential write and read bandwidth (calibrate_disk.h): `in_flight` threads each
// issue every in_flight-th request of the file with pwrite / pread on one descriptor opened with
// O_DIRECT, so that many requests are in flight at once in file order; the write pass ends with
// fdatasync inside its timing, so what is timed reached the disk.
#include "tessel/plan/calibrate_disk.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::plan {

namespace {

constexpr size_t kAlignment = 4096;  // direct I/O's buffer, offset and length alignment

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Seconds for every request of the file, `write` or read, from `threads` threads.
double pass(int fd, int64_t bytes, int64_t request, int threads, bool write,
            const std::string& path) {
  std::atomic<bool> failed{false};
  std::atomic<int> error{0};
  const int64_t requests = bytes / request;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      void* raw = std::aligned_alloc(kAlignment, size_t(request));
      if (raw == nullptr) {
        failed = true;
        error = ENOMEM;
        return;
      }
      std::unique_ptr<void, decltype(&std::free)> buf(raw, &std::free);
      std::memset(raw, 0x5a + t, size_t(request));
      for (int64_t r = t; r < requests && !failed; r += threads) {
        const off_t at = off_t(r * request);
        const ssize_t n =
            write ? ::pwrite(fd, raw, size_t(request), at) : ::pread(fd, raw, size_t(request), at);
        if (n != ssize_t(request)) {
          error = n < 0 ? errno : EIO;
          failed = true;
        }
      }
    });
  for (std::thread& th : pool) th.join();
  if (!failed && write && ::fdatasync(fd) != 0) {
    error = errno;
    failed = true;
  }
  TESSEL_CHECK(!failed, "plan calibrate --disk: ", write ? "writing " : "reading ", path, ": ",
               std::strerror(error.load()));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void check_disk_dir(const std::string& dir, int64_t bytes) {
  struct statvfs fs {};
  TESSEL_CHECK(::statvfs(dir.c_str(), &fs) == 0, "plan calibrate --disk: ", dir, ": ",
               std::strerror(errno));
  TESSEL_CHECK(::access(dir.c_str(), W_OK) == 0, "plan calibrate --disk: ", dir,
               " is not writable: ", std::strerror(errno));
  const int64_t free_bytes = int64_t(fs.f_bavail) * int64_t(fs.f_frsize);
  TESSEL_CHECK(free_bytes >= bytes, "plan calibrate --disk: ", dir, " has ", free_bytes,
               " bytes free, the test file needs ", bytes);
}

DiskResult measure_disk(const DiskOptions& o) {
  TESSEL_CHECK(o.request_bytes > 0 && o.request_bytes % int64_t(kAlignment) == 0,
               "plan calibrate --disk: the request size ", o.request_bytes,
               " must be a positive multiple of ", kAlignment);
  TESSEL_CHECK(o.bytes >= o.request_bytes && o.in_flight >= 1, "plan calibrate --disk: ", o.bytes,
               " bytes in requests of ", o.request_bytes, " with ", o.in_flight,
               " in flight is nothing to measure");
  const int64_t bytes = o.bytes / o.request_bytes * o.request_bytes;
  check_disk_dir(o.dir, bytes);
  const std::string path = o.dir + "/tessel-calibrate-disk-" + o.file_tag + ".dat";
  DiskResult result;
  Fd f;
  f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (f.fd < 0 && errno == EINVAL) {  // tmpfs and some others: no direct I/O
    result.direct = false;
    f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  }
  TESSEL_CHECK(f.fd >= 0, "plan calibrate --disk: cannot create ", path, ": ",
               std::strerror(errno));
  struct Remove {
    std::string path;
    ~Remove() { ::unlink(path.c_str()); }
  } remove{path};
  const double w = pass(f.fd, bytes, o.request_bytes, o.in_flight, true, path);
  const double r = pass(f.fd, bytes, o.request_bytes, o.in_flight, false, path);
  result.storage.write_bandwidth = double(bytes) / w;
  result.storage.read_bandwidth = double(bytes) / r;
  return result;
}

}  // namespace tessel::plan
