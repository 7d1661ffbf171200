// SPDX-License-Identifier: Apache-2.0
// GGUF files (the ggml container: header, typed key-value metadata, tensor infos, aligned tensor
// data). The reader maps the file (or, for a process that reads some tensors, reads the header and
// maps windows of the file on demand: GgufMapping) and checks every count, length, type id, shape
// and offset against the bytes that are really there before trusting it, so a damaged or hostile
// file gives one Error naming the file and the bad value; tensors are views of the mapping (kept
// alive by the tensors, as with safetensors). Quantized tensors parse and report their ggml type;
// their raw bytes are exposed for the quantized kernels, and asking for one as a float Tensor is an
// Error. The writer emits version 3 with the same checks applied to what it is given.
//
// Dimension order is ggml's: dims[0] is the contiguous (fastest-varying) one, so a row-major
// tessel Shape [out, in] is stored as dims {in, out}. GgufTensorInfo::shape() gives the tessel
// order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessel/io/mapped_file.h"
#include "tessel/tensor/tensor.h"

namespace tessel::io {

// Metadata value types, with their ids in the file.
enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
const char* gguf_type_name(GgufType type);  // "u32", "string", "array", ...

// One metadata value: a scalar, a string, or an array of values of one element type (arrays may
// nest). Integers keep their stored width in `type`; the accessors convert with range checks.
struct GgufValue {
  GgufType type = GgufType::U32;
  uint64_t uint = 0;             // U8, U16, U32, U64, Bool
  int64_t sint = 0;              // I8, I16, I32, I64
  double real = 0;               // F32, F64
  std::string str;               // String
  GgufType elem = GgufType::U8;  // Array: the element type
  std::vector<GgufValue> items;  // Array

  static GgufValue of(GgufType type, uint64_t u);  // any unsigned integer type or Bool
  static GgufValue of_int(GgufType type, int64_t i);
  static GgufValue of_float(GgufType type, double d);
  static GgufValue of_u32(uint32_t v) { return of(GgufType::U32, v); }
  static GgufValue of_bool(bool v) { return of(GgufType::Bool, v ? 1 : 0); }
  static GgufValue of_string(std::string s);
  static GgufValue of_array(GgufType elem, std::vector<GgufValue> items);
  static GgufValue of_strings(const std::vector<std::string>& items);

  bool is_integer() const;
  // The value as a number; an Error naming `what` (the key) when it is not one or is out of range.
  int64_t as_int(const std::string& what) const;
  double as_double(const std::string& what) const;
  bool as_bool(const std::string& what) const;
  const std::string& as_string(const std::string& what) const;
  const std::vector<GgufValue>& as_array(const std::string& what) const;
  bool operator==(const GgufValue& other) const;
};

// Metadata in file order; keys are unique.
class GgufMetadata {
 public:
  void set(const std::string& key, GgufValue value);  // replaces an existing key in place
  const GgufValue* find(const std::string& key) const;
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  // The value of `key`; an Error naming `what` (the file) and the key when absent.
  const GgufValue& at(const std::string& key, const std::string& what) const;
  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, GgufValue>> entries_;
  std::map<std::string, size_t> index_;
};

// ggml tensor types: every id the format has assigned, with its block geometry (elements per
// block and bytes per block), so files holding any of them validate.
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;  // "F32", "Q8_0", ...
  uint32_t block_size;
  uint32_t block_bytes;
};
namespace ggml {
inline constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13,
                          kQ6_K = 14, kBF16 = 30;
}
// The type with this id, or null for an id that was never assigned or was removed.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// The name of any id ("Q8_0"; "type 77" for an unknown one).
std::string ggml_type_name(uint32_t id);
// The ggml type of a tessel dtype (F32, F16, BF16, I8, I32, I64, F64), and back for float types.
uint32_t ggml_type_of(DType dtype);
std::optional<DType> dtype_of_ggml(uint32_t id);

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;
inline constexpr uint64_t kGgufMaxNameBytes = 64;    // tensor names
inline constexpr uint64_t kGgufMaxKeyBytes = 65535;  // metadata keys
inline constexpr int kGgufMaxArrayNesting = 8;

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is contiguous
  uint32_t type = ggml::kF32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  int64_t numel() const;
  Shape shape() const;  // tessel's row-major order (dims reversed)
};

struct GgufHeader {
  uint32_t version = 3;
  GgufMetadata metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t data_start = 0;  // file offset of the data section
};

// Validates a whole GGUF file held in memory; throws Error naming `what` and the bad value.
GgufHeader parse_gguf(const uint8_t* bytes, size_t size, const std::string& what);
// True when the bytes start with the GGUF magic (for telling a .gguf from a model directory).
bool is_gguf_file(const std::string& path);

// How GgufFile::open makes the tensors' bytes addressable.
enum class GgufMapping {
  Whole,  // the whole file mapped once: every tensor is a view of one mapping (one process)
  // The header read with pread and nothing mapped until asked: map() maps the page-aligned window
  // around the bytes asked for, so a process that reads some tensors (a pipeline stage's rank, a
  // tensor-parallel share, a reader of the metadata alone) has only those in its address space.
  Windows,
};

// Bytes of a GGUF tensor and what keeps them addressable (a mapping; hold it as long as a view
// of the bytes lives).
struct GgufBytes {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> keep;
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path, GgufMapping mapping = GgufMapping::Whole);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return header_.version; }
  uint64_t alignment() const { return header_.alignment; }
  const GgufMetadata& metadata() const { return header_.metadata; }
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const GgufTensorInfo& info(const std::string& name) const;
  GgufMapping mapping() const { return windows_ ? GgufMapping::Windows : GgufMapping::Whole; }
  // The stored bytes of tensor `name` (any type), a view of the mapping. Under Windows the
  // tensor's window is mapped once and kept as long as this file (prefer map()).
  std::span<const uint8_t> raw(const std::string& name) const;
  // Bytes [begin, begin + length) of tensor `name` (all of it by default): a view of the whole
  // mapping, or under Windows a mapping of their window alone, released with the last `keep`.
  GgufBytes map(const std::string& name, uint64_t begin = 0,
                std::optional<uint64_t> length = std::nullopt) const;
  // Copies `size` bytes of tensor `name` from byte `begin` (pread under Windows: nothing mapped).
  void read(const std::string& name, uint64_t begin, void* dst, size_t size) const;
  // The tensor as a tessel Tensor in `want` (default: as stored) for F32, F16, BF16 (and the
  // integer types): zero-copy when no conversion is needed. A quantized tensor is an Error that
  // names it and its type.
  Tensor load(const std::string& name, std::optional<DType> want = std::nullopt) const;
  // Whether `t` views this file's bytes (the whole mapping, or a window raw() keeps).
  bool is_zero_copy(const Tensor& t) const;

 private:
  struct Windows;  // the open file and the windows raw() keeps (Windows mapping)
  // [begin, begin + length) of tensor `t`, checked against its byte size.
  uint64_t tensor_offset(const GgufTensorInfo& t, uint64_t begin, uint64_t length) const;

  // Whole: the mapping; Windows: an empty mapping that names the file (nothing mapped).
  std::shared_ptr<MappedFile> file_;
  std::shared_ptr<Windows> windows_;  // Windows
  GgufHeader header_;
  std::map<std::string, size_t> index_;
};

// A tensor to write: its bytes in ggml type `type` with ggml-order dims. from_tensor() takes a
// contiguous CPU tensor as it is (F32, F16, BF16, ...) and keeps it alive instead of copying.
struct GgufTensorOut {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = ggml::kF32;
  std::vector<uint8_t> bytes;  // used when `tensor` is undefined (e.g. quantized blocks)
  Tensor tensor;

  static GgufTensorOut from_tensor(const std::string& name, const Tensor& t);
  const uint8_t* data() const;
  size_t size() const;
};

// The bytes of a GGUF v3 file. The alignment is the metadata's general.alignment when set (a u32,
// multiple of 8), else 32. Checks names, dims and byte counts as the reader would.
std::vector<uint8_t> serialize_gguf(const GgufMetadata& metadata,
                                    const std::vector<GgufTensorOut>& tensors);
// Writes them to `path` atomically.
void save_gguf(const std::string& path, const GgufMetadata& metadata,
               const std::vector<GgufTensorOut>& tensors);

}  // namespace tessel::io
