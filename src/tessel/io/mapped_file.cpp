// SPDX-License-Identifier: Apache-2.0
#include "tessel/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tessel/core/error.h"

namespace tessel::io {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TESSEL_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    TESSEL_FAIL("cannot stat '", path, "': ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    TESSEL_FAIL("'", path, "' is not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size_t(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    TESSEL_CHECK(p != MAP_FAILED, "cannot map '", path, "' (", file->size_,
                 " bytes): ", std::strerror(err));
    file->data_ = static_cast<uint8_t*>(p);
  } else {
    ::close(fd);
  }
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

void write_file_atomic(const std::string& path, const void* bytes, size_t size) {
  const std::span<const uint8_t> one(static_cast<const uint8_t*>(bytes), size);
  write_file_atomic(path, std::span<const std::span<const uint8_t>>(&one, 1));
}

void write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> pieces) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp =
      (dir / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TESSEL_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  size_t size = 0, written = 0;
  for (const auto& piece : pieces) size += piece.size();
  for (const auto& piece : pieces) {
    const char* p = reinterpret_cast<const char*>(piece.data());
    size_t left = piece.size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        TESSEL_FAIL("writing '", tmp, "' failed after ", written, " of ", size,
                    " bytes: ", std::strerror(err));
      }
      p += n;
      left -= size_t(n);
      written += size_t(n);
    }
  }
  bool synced = ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!synced) {
    ::unlink(tmp.c_str());
    TESSEL_FAIL("fsync of '", tmp, "' failed: ", std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    TESSEL_FAIL("cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // makes the rename itself durable
    ::close(dfd);
  }
}

}  // namespace tessel::io
