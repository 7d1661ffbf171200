// SPDX-License-Identifier: Apache-2.0
// safetensors files (the Hugging Face format: u64 header length, JSON header, packed little-endian
// row-major tensors). The reader maps the file or reads it with pread (SafetensorsLoad) and
// validates everything before trusting any size: header bound, JSON, dtype names, shape x dtype =
// byte range, offsets inside the buffer, no overlaps or holes, no duplicate names. A mapped load
// is zero-copy when the stored dtype is the one wanted; F16/BF16/F32/F64 convert on load. The
// writer follows the reference writer's layout (tensors by descending alignment then name, header
// padded to 8 bytes) and writes atomically.
#pragma once

#include <cstdint>
#include <functional>
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
// The same from the file's first `have` bytes (the length prefix and the header) and its `size`:
// what a reader that does not map the file has read. safetensors_prefix_bytes says how many to
// read from the first 8 (8 alone when the length is out of bounds, so that the parse refuses it).
SafetensorsHeader parse_safetensors_prefix(const uint8_t* bytes, size_t have, uint64_t size,
                                           const std::string& what);
uint64_t safetensors_prefix_bytes(const uint8_t* first8, uint64_t file_size);

// The tessel dtype of a safetensors dtype name, if tessel computes in it.
std::optional<DType> dtype_from_safetensors(const std::string& name);
std::string safetensors_dtype_name(DType dtype);

// How a file is read. Map maps it whole and load() views it where it can (zero-copy; the pages it
// touches stay resident while the file is open, and the mapping takes the file's size of address
// space). Read maps nothing: the header is read with pread, then each tensor's bytes when it is
// loaded, for a caller that copies the values into tensors of its own (a model's parameters, a
// rank's pieces), so that neither the file's pages nor its address range are held beside them.
enum class SafetensorsLoad { Map, Read };

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path, SafetensorsLoad mode = SafetensorsLoad::Map);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool is_mapped() const { return file_ != nullptr; }

  // The tensor `name` in dtype `want` (default: as stored). Map: zero-copy (a view of the mapped
  // file, kept alive by the tensor) when no conversion is needed and the data is aligned, else a
  // copy. Read: a new tensor the bytes are read into.
  Tensor load(const std::string& name, std::optional<DType> want = std::nullopt) const;
  // Elements [first, first + dst.numel()) of tensor `name` (row-major) written into `dst`, a host
  // tensor of any shape, converted to its dtype (float to float, integer to integer): read
  // straight into it when the dtypes agree, else through a staging buffer of at most 1 MiB. The
  // way to load into memory that already exists (a parameter) without a temporary of the
  // tensor's size.
  void load_into(const std::string& name, const Tensor& dst, int64_t first = 0) const;
  bool is_zero_copy(const Tensor& t) const;
  // Where tensor `name`'s bytes start in the file (for readers that fetch ranges themselves).
  uint64_t file_offset(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;    // SafetensorsLoad::Map
  std::shared_ptr<FileReader> reader_;  // SafetensorsLoad::Read
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The bytes of a safetensors file holding `tensors` (names unique) and string metadata.
std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors,
                                           const std::map<std::string, std::string>& metadata = {});
// Writes them to `path` atomically, each tensor's bytes straight from its memory (no image of
// the file is assembled).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Receives a tensor's bytes, in order, in as many calls as the producer likes.
using ByteSink = std::function<void(const void* bytes, size_t size)>;

// A tensor of a streamed file: its stored dtype and shape, and a producer that passes exactly
// its numel x dtype-size bytes (row-major) to the sink it is given. The producer runs once, when
// the file reaches the tensor, so it can read the values from wherever they live (a shard of a
// parameter, a checkpoint piece on disk) through a buffer of its own choosing.
struct StreamedTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::function<void(const ByteSink&)> write;
  uint64_t nbytes() const { return uint64_t(shape.numel()) * dtype_size(dtype); }
};

// A StreamedTensor whose bytes are `t`'s own (written from its memory, no copy).
StreamedTensor streamed_view(const std::string& name, const Tensor& t);

// Writes a safetensors file atomically (same layout as serialize_safetensors), calling each
// tensor's producer in file order; an Error when a producer passes too few or too many bytes.
// The memory it needs is the header: whatever buffering there is belongs to the producers.
void write_safetensors_streamed(const std::string& path, const std::vector<StreamedTensor>& tensors,
                                const std::map<std::string, std::string>& metadata = {});

}  // namespace tessel::io
