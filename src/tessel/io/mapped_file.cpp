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
    file->map_base_ = p;
    file->map_bytes_ = file->size_;
  } else {
    ::close(fd);
  }
  return file;
}

std::shared_ptr<MappedFile> MappedFile::open_window(const FileReader& file, uint64_t offset,
                                                    size_t size) {
  TESSEL_CHECK(offset <= file.size() && size <= file.size() - offset, "cannot map bytes [", offset,
               ", +", size, ") of '", file.path(), "': the file has ", file.size());
  std::shared_ptr<MappedFile> out(new MappedFile());
  out->path_ = file.path();
  out->size_ = size;
  if (size == 0) return out;
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t base = offset / page * page;
  const size_t bytes = size_t(offset - base) + size;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.fd(), off_t(base));
  TESSEL_CHECK(p != MAP_FAILED, "cannot map bytes [", offset, ", +", size, ") of '", file.path(),
               "': ", std::strerror(errno));
  out->map_base_ = p;
  out->map_bytes_ = bytes;
  out->data_ = static_cast<uint8_t*>(p) + (offset - base);
  return out;
}

MappedFile::~MappedFile() {
  if (map_base_ != nullptr) ::munmap(map_base_, map_bytes_);
}

void write_file_atomic(const std::string& path, const void* bytes, size_t size) {
  const std::span<const uint8_t> one(static_cast<const uint8_t*>(bytes), size);
  write_file_atomic(path, std::span<const std::span<const uint8_t>>(&one, 1));
}

void write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> pieces) {
  AtomicFileWriter out(path);
  for (const auto& piece : pieces) out.write(piece.data(), piece.size());
  out.commit();
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  tmp_ = (dir / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TESSEL_CHECK(fd_ >= 0, "cannot create '", tmp_, "': ", std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* bytes, size_t size) {
  TESSEL_CHECK(fd_ >= 0, "writing '", path_, "' after it was committed");
  const char* p = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    TESSEL_CHECK(n > 0, "writing '", tmp_, "' failed after ", written_,
                 " bytes: ", std::strerror(n < 0 ? errno : ENOSPC));
    p += n;
    size -= size_t(n);
    written_ += uint64_t(n);
  }
}

void AtomicFileWriter::commit() {
  TESSEL_CHECK(fd_ >= 0, "'", path_, "' was already committed");
  const bool synced = ::fsync(fd_) == 0;
  int err = errno;
  ::close(fd_);
  fd_ = -1;
  if (!synced) {
    ::unlink(tmp_.c_str());
    TESSEL_FAIL("fsync of '", tmp_, "' failed: ", std::strerror(err));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    err = errno;
    ::unlink(tmp_.c_str());
    TESSEL_FAIL("cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(err));
  }
  namespace fs = std::filesystem;
  const fs::path target(path_);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // makes the rename itself durable
    ::close(dfd);
  }
}

FileReader::FileReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TESSEL_CHECK(fd_ >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  const bool stated = ::fstat(fd_, &st) == 0;
  const int err = errno;
  if (!stated || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    TESSEL_CHECK(stated, "cannot stat '", path, "': ", std::strerror(err));
    TESSEL_FAIL("'", path, "' is not a regular file");
  }
  size_ = uint64_t(st.st_size);
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

FileReader::FileReader(FileReader&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

void FileReader::read_at(uint64_t offset, void* dst, size_t size) const {
  char* p = static_cast<char*>(dst);
  uint64_t at = offset;
  while (size > 0) {
    const ssize_t n = ::pread(fd_, p, size, off_t(at));
    if (n < 0 && errno == EINTR) continue;
    TESSEL_CHECK(n >= 0, "reading '", path_, "' at byte ", at, " failed: ", std::strerror(errno));
    TESSEL_CHECK(n > 0, "'", path_, "' ends at byte ", at, ", before the ", size,
                 " more bytes expected there (truncated?)");
    p += n;
    size -= size_t(n);
    at += uint64_t(n);
  }
}

}  // namespace tessel::io
