// SPDX-License-Identifier: Apache-2.0
// safetensors files (the Hugging Face format: u64 header length, JSON header, packed little-endian
// row-major tensors). The reader maps the file and validates everything before trusting any size:
// header bound, JSON, dtype names, shape x dtype = byte range, offsets inside the buffer, no
// overlaps or holes, no duplicate names. Loading is zero-copy when the stored dtype is the one
// wanted; F16/BF16/F32/F64 convert on load. The writer follows the reference writer's layout
// (tensors by descending alignment then name, header padded to 8 bytes) and writes atomically.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/io/mapped_file.h"
#include "tessel/tensor/tensor.h"

namespace tessel::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as stored: "F32", "BF16", "U8", ...
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range relative to the data buffer
};

// The parsed, validated header of a safetensors buffer.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in file order of their offsets
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// Validates a whole safetensors file held in memory; throws Error naming `what` (the file) and
// the offending entry.
SafetensorsHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& what);

// The tessel dtype of a safetensors dtype name, if tessel computes in it.
std::optional<DType> dtype_from_safetensors(const std::string& name);
std::string safetensors_dtype_name(DType dtype);

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // The tensor `name` in dtype `want` (default: as stored). Zero-copy (a view of the mapped file,
  // kept alive by the tensor) when no conversion is needed and the data is aligned; else a copy.
  Tensor load(const std::string& name, std::optional<DType> want = std::nullopt) const;
  bool is_zero_copy(const Tensor& t) const;

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The bytes of a safetensors file holding `tensors` (names unique) and string metadata.
std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors,
                                           const std::map<std::string, std::string>& metadata = {});
// Writes them to `path` atomically.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace tessel::io
