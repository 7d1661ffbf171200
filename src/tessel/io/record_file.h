// SPDX-License-Identifier: Apache-2.0
// An append-only file of whole records, the base of the crash-safe logs (the training JSONL, the
// TensorBoard event files): append() writes one record completely or, when the write fails (disk
// full, file-size limit, I/O error), cuts the file back to the end of the last whole record and
// throws an Error that names the file and the operating system's reason. A reader after a crash
// therefore never meets a torn record that this process left.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessel::io {

class RecordFile {
 public:
  RecordFile() = default;
  // Takes ownership of `fd`, opened for writing on `path` (empty, or holding whole records).
  // `failure` begins the Error of a failed write, e.g. "train: cannot write the JSONL log P
  // (log.jsonl)"; the reason and the bytes already written follow it.
  RecordFile(int fd, std::string path, std::string failure);
  ~RecordFile();
  RecordFile(RecordFile&& other) noexcept;
  RecordFile& operator=(RecordFile&& other) noexcept;
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // bytes of whole records
  // No-op when not open.
  void append(std::string_view record);

 private:
  void close();
  int fd_ = -1;
  std::string path_, failure_;
  int64_t size_ = 0;
};

}  // namespace tessel::io
