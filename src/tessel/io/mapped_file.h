// SPDX-License-Identifier: Apache-2.0
// A read-only file mapped into memory (private copy-on-write pages, so a tensor that views it may
// be written without touching the file). Shared by every zero-copy tensor made from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace tessel::io {

class FileReader;

class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);  // throws Error
  // Bytes [offset, offset + size) of an open file: the page-aligned window around them is mapped
  // (the same private copy-on-write pages), and data() points at `offset`. A process that needs
  // only some ranges of a large file maps those, so its address space (VmPeak) holds them only.
  static std::shared_ptr<MappedFile> open_window(const FileReader& file, uint64_t offset,
                                                 size_t size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint8_t* mutable_data() { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_base_ = nullptr;  // what munmap releases: the whole file, or the page-aligned window
  size_t map_bytes_ = 0;
  std::string path_;
};

// A file written front to back under a temporary name in the same folder and made visible whole:
// commit() fsyncs it, renames it to `path` and fsyncs the folder. Destroyed uncommitted, it
// deletes the temporary file. Every write is checked (a short write is retried, a failed one
// throws naming the file), so a writer that produces the bytes piece by piece (a checkpoint
// streamed from the tensors where they live) needs no buffer of the whole file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* bytes, size_t size);
  uint64_t written() const { return written_; }
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// A file read with pread at any offset: bytes land where the caller wants them (a tensor being
// restored), and nothing of the file stays mapped in the process (a mapped file's pages count in
// its resident set for as long as the mapping lives).
class FileReader {
 public:
  explicit FileReader(const std::string& path);
  ~FileReader();
  FileReader(FileReader&& other) noexcept;
  FileReader& operator=(FileReader&&) = delete;
  FileReader(const FileReader&) = delete;

  // Reads exactly `size` bytes at `offset`; an Error names the file when it is shorter.
  void read_at(uint64_t offset, void* dst, size_t size) const;
  const std::string& path() const { return path_; }
  // The file's size when it was opened (a regular file; an Error otherwise).
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes `bytes` to `path` atomically: a temporary file in the same folder, fsync, rename, then
// fsync of the folder. A crash leaves either the old file or the new one, never half of one.
void write_file_atomic(const std::string& path, const void* bytes, size_t size);
// The same for a file made of pieces written in order, without first copying them into one buffer
// (a GGUF: its header, then each tensor's bytes where they already are).
void write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> pieces);

}  // namespace tessel::io
