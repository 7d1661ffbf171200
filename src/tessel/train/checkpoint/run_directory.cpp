// SPDX-License-Identifier: Apache-2.0
// The run directory's lock and space checks. The lock is an open-file-description lock
// (F_OFD_SETLK): the kernel drops it when its holder dies, however it dies, so a lock left by a
// dead process is simply free; it is per open file rather than per process, so two trainers in one
// process exclude each other as two processes do; and NFS carries it to the server as a POSIX lock,
// so runs on different machines sharing a run directory exclude each other too. Where the
// filesystem refuses locks altogether, the pid and host written into the file decide: a holder on
// this host that no longer exists is stale and its lock is taken over.
#include "tessel/train/checkpoint/run_directory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessel/core/error.h"
#include "tessel/train/metrics/metrics.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string read_fd(int fd) {
  std::string text;
  char buf[4096];
  for (off_t at = 0; text.size() < 65536;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, size_t(n));
    at += n;
  }
  return text;
}

struct Holder {
  int64_t pid = 0;
  std::string host, started;
  std::string str() const {
    return "pid " + std::to_string(pid) + " on host " + host +
           (started.empty() ? std::string() : " (started " + started + ")");
  }
};

// The holder a lock file names; nullopt for an empty file or one that is not ours (then nothing
// can be said about who wrote it).
std::optional<Holder> parse_holder(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer())
    return std::nullopt;
  Holder h;
  h.pid = j["pid"].get<int64_t>();
  h.host = j.value("host", std::string("?"));
  h.started = j.value("started", std::string());
  return h;
}

// Without kernel locks: is the holder a process that still exists? Only decidable on its host.
bool holder_alive(const Holder& h) {
  if (h.host != this_host()) return true;  // another machine's pid: assume it runs
  return h.pid > 0 && (::kill(pid_t(h.pid), 0) == 0 || errno == EPERM);
}

void write_all_at_start(int fd, const std::string& text, const std::string& path) {
  TESSEL_CHECK(::ftruncate(fd, 0) == 0, "train: cannot write the run lock ", path, ": ",
               std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    TESSEL_CHECK(n > 0, "train: cannot write the run lock ", path, ": ", std::strerror(errno));
    done += size_t(n);
  }
  TESSEL_CHECK(::fsync(fd) == 0, "train: cannot write the run lock ", path, ": ",
               std::strerror(errno));
}

// Creating and deleting a file proves what writing checkpoints needs (a lock file that already
// exists says nothing about the directory: it may be immutable or on a read-only mount).
void check_writable(const std::string& dir) {
  const std::string probe =
      (fs::path(dir) / (".write-test.tmp-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TESSEL_CHECK(fd >= 0, "train: cannot write to the run directory '", dir,
               "' (checkpoint.dir): creating a file there failed: ", std::strerror(errno));
  ::close(fd);
  TESSEL_CHECK(::unlink(probe.c_str()) == 0, "train: cannot delete files in the run directory '",
               dir,
               "' (checkpoint.dir; old checkpoints are deleted there): ", std::strerror(errno));
}

}  // namespace

RunLock::RunLock(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  TESSEL_CHECK(!ec, "train: cannot create the run directory '", run_dir,
               "' (checkpoint.dir): ", ec.message());
  TESSEL_CHECK(fs::is_directory(run_dir, ec), "train: the run directory '", run_dir,
               "' (checkpoint.dir) is not a directory");
  check_writable(run_dir);
  path_ = (fs::path(run_dir) / kRunLockFile).string();
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TESSEL_CHECK(fd_ >= 0, "train: cannot open the run lock ", path_, ": ", std::strerror(errno));
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file
  const bool locked = ::fcntl(fd_, F_OFD_SETLK, &fl) == 0;
  const int lock_errno = errno;
  const std::optional<Holder> previous = parse_holder(read_fd(fd_));
  if (!locked) {
    const bool held = lock_errno == EAGAIN || lock_errno == EACCES;
    // EINVAL (no OFD locks), ENOLCK, EOPNOTSUPP: the filesystem has no locks; the file decides.
    if (held || (previous && holder_alive(*previous))) {
      const std::string who = previous ? previous->str() : "another process";
      ::close(fd_);
      fd_ = -1;
      TESSEL_FAIL("train: the run directory '", run_dir, "' is in use by ", who,
                  ": a run directory belongs to one run (", kRunLockFile,
                  " is locked); wait for that run to end, stop it, or set checkpoint.dir to "
                  "another directory");
    }
  }
  // Ours now. A holder named in the file ended without releasing it.
  if (previous) reclaimed_from_ = previous->str();
  const nlohmann::json me{
      {"pid", int64_t(::getpid())}, {"host", this_host()}, {"started", now_utc()}};
  try {
    write_all_at_start(fd_, me.dump() + "\n", path_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) {
    // Left with our pid in it: the next run reclaims it as the lock of a process that ended.
  }
  ::close(fd_);  // closing the last descriptor of the description releases the lock
}

std::string run_lock_holder(const std::string& run_dir) {
  const int fd = ::open((fs::path(run_dir) / kRunLockFile).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const std::optional<Holder> h = parse_holder(read_fd(fd));
  ::close(fd);
  return h ? h->str() : "";
}

uint64_t free_bytes(const std::string& dir) {
  struct statvfs st {};
  TESSEL_CHECK(::statvfs(dir.c_str(), &st) == 0, "train: cannot read the free space of '", dir,
               "': ", std::strerror(errno));
  return uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
}

void check_free_space(const std::string& dir, uint64_t needed, const std::string& what) {
  const uint64_t available = free_bytes(dir);
  TESSEL_CHECK(available >= needed, "train: the run directory '", dir, "' has ",
               format_bytes(double(available)), " free (", available, " bytes), but ", what,
               " needs about ", format_bytes(double(needed)), " (", needed,
               " bytes): free some space or set checkpoint.dir to another filesystem");
}

}  // namespace tessel::train
