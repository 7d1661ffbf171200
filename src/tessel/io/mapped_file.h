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

class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);  // throws Error
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
  std::string path_;
};

// Writes `bytes` to `path` atomically: a temporary file in the same folder, fsync, rename, then
// fsync of the folder. A crash leaves either the old file or the new one, never half of one.
void write_file_atomic(const std::string& path, const void* bytes, size_t size);
// The same for a file made of pieces written in order, without first copying them into one buffer
// (a GGUF: its header, then each tensor's bytes where they already are).
void write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> pieces);

}  // namespace tessel::io
