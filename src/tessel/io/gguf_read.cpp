// SPDX-License-Identifier: Apache-2.0
// The GGUF reader. Every length, count and offset comes from the file, so each is compared with
// the bytes that remain before it is used: a count is bounded by (bytes left / smallest encoding
// of one item) before anything is reserved, a string's length by the bytes left, a tensor's byte
// range by the data section, and arrays nest at most kGgufMaxArrayNesting deep so a hostile file
// cannot exhaust the stack.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>

#include "tessel/io/gguf.h"

namespace tessel::io {

namespace {

// Thrown while parsing the first bytes of a longer file when the header goes on past them.
struct NeedMoreBytes {};

// Reads little-endian values from a bounded buffer; every read names what it was reading. The
// buffer may be the first `size` bytes of a file of `total`: a check that fails there for want of
// bytes asks for more (NeedMoreBytes) rather than calling the file bad.
class Cursor {
 public:
  Cursor(const uint8_t* bytes, size_t size, uint64_t total, const std::string& what)
      : bytes_(bytes), size_(size), total_(total), what_(what) {}

  size_t at() const { return at_; }
  uint64_t left() const { return size_ - at_; }
  uint64_t total() const { return total_; }
  // Before a check on left(): a failure that more of the file could cure asks for it.
  void more_unless(bool ok) const {
    if (!ok && size_ < total_) throw NeedMoreBytes{};
  }

  void need(uint64_t n, const char* thing) const {
    more_unless(n <= left());
    TESSEL_CHECK(n <= left(), what_, ": truncated file: ", thing, " at offset ", at_, " needs ", n,
                 " bytes but only ", left(), " remain (file size ", total_, ")");
  }
  uint64_t uint(int nbytes, const char* thing) {
    need(uint64_t(nbytes), thing);
    uint64_t v = 0;
    for (int i = nbytes - 1; i >= 0; --i) v = (v << 8) | bytes_[at_ + size_t(i)];
    at_ += size_t(nbytes);
    return v;
  }
  uint32_t u32(const char* thing) { return uint32_t(uint(4, thing)); }
  uint64_t u64(const char* thing) { return uint(8, thing); }
  std::string str(const char* thing, uint64_t max_bytes) {
    const size_t start = at_;
    uint64_t n = u64(thing);
    more_unless(n <= left());
    TESSEL_CHECK(n <= left(), what_, ": ", thing, " at offset ", start, " has length ", n,
                 ", past the end of the file (", left(), " bytes remain)");
    TESSEL_CHECK(n <= max_bytes, what_, ": ", thing, " at offset ", start, " has length ", n,
                 " (at most ", max_bytes, " allowed)");
    std::string s(reinterpret_cast<const char*>(bytes_ + at_), size_t(n));
    at_ += size_t(n);
    return s;
  }

 private:
  const uint8_t* bytes_;
  size_t size_;
  uint64_t total_;
  size_t at_ = 0;
  const std::string& what_;
};

// Bytes of one value of `type` at least (strings and arrays: their length fields).
uint64_t min_encoded_bytes(GgufType type) {
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::String:
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    case GgufType::Array:
      return 12;
  }
  return 1;
}

GgufType value_type(uint32_t id, const std::string& what, const std::string& key, size_t at) {
  TESSEL_CHECK(id <= 12, what, ": metadata '", key, "' has unknown value type ", id, " at offset ",
               at, " (known: 0-12)");
  return GgufType(id);
}

int64_t sign_extend(uint64_t v, int nbytes) {
  const int shift = 64 - 8 * nbytes;
  return int64_t(v << shift) >> shift;
}

GgufValue read_value(Cursor& in, GgufType type, const std::string& what, const std::string& key,
                     int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8:
      v.uint = in.uint(1, "a u8 value");
      break;
    case GgufType::U16:
      v.uint = in.uint(2, "a u16 value");
      break;
    case GgufType::U32:
      v.uint = in.uint(4, "a u32 value");
      break;
    case GgufType::U64:
      v.uint = in.uint(8, "a u64 value");
      break;
    case GgufType::I8:
      v.sint = sign_extend(in.uint(1, "an i8 value"), 1);
      break;
    case GgufType::I16:
      v.sint = sign_extend(in.uint(2, "an i16 value"), 2);
      break;
    case GgufType::I32:
      v.sint = sign_extend(in.uint(4, "an i32 value"), 4);
      break;
    case GgufType::I64:
      v.sint = int64_t(in.uint(8, "an i64 value"));
      break;
    case GgufType::F32: {
      uint32_t bits = in.u32("an f32 value");
      float f;
      std::memcpy(&f, &bits, 4);
      v.real = f;
      break;
    }
    case GgufType::F64: {
      uint64_t bits = in.u64("an f64 value");
      std::memcpy(&v.real, &bits, 8);
      break;
    }
    case GgufType::Bool: {
      const size_t at = in.at();
      v.uint = in.uint(1, "a bool value");
      TESSEL_CHECK(v.uint <= 1, what, ": metadata '", key, "' has bool byte ", v.uint,
                   " at offset ", at, " (must be 0 or 1)");
      break;
    }
    case GgufType::String:
      v.str = in.str("a string value", std::numeric_limits<uint64_t>::max());
      break;
    case GgufType::Array: {
      TESSEL_CHECK(depth < kGgufMaxArrayNesting, what, ": metadata '", key,
                   "' nests arrays deeper than ", kGgufMaxArrayNesting, " levels");
      const size_t at = in.at();
      v.elem = value_type(in.u32("an array element type"), what, key, at);
      const size_t count_at = in.at();
      uint64_t count = in.u64("an array length");
      in.more_unless(count <= in.left() / min_encoded_bytes(v.elem));
      TESSEL_CHECK(count <= in.left() / min_encoded_bytes(v.elem), what, ": metadata '", key,
                   "' array at offset ", count_at, " claims ", count, " ", gguf_type_name(v.elem),
                   " elements but only ", in.left(), " bytes remain");
      v.items.reserve(size_t(count));
      for (uint64_t i = 0; i < count; ++i)
        v.items.push_back(read_value(in, v.elem, what, key, depth + 1));
      break;
    }
  }
  return v;
}

// Bytes of a tensor with these dims and type; Errors for overflow and partial blocks.
uint64_t tensor_bytes(const GgufTensorInfo& t, const GgmlTypeInfo& type, const std::string& what) {
  const uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
  uint64_t numel = 1;
  for (uint64_t d : t.dims) {
    TESSEL_CHECK(d <= kMax, what, ": tensor '", t.name, "' has dimension ", d, " (too large)");
    TESSEL_CHECK(d == 0 || numel <= kMax / d, what, ": tensor '", t.name,
                 "': the element count overflows (dims multiply past 2^63)");
    numel *= d;
  }
  TESSEL_CHECK(t.dims[0] % type.block_size == 0, what, ": tensor '", t.name, "' of type ",
               type.name, " has rows of ", t.dims[0],
               " elements, not a multiple of its block size ", type.block_size);
  uint64_t blocks = numel / type.block_size;
  TESSEL_CHECK(blocks <= kMax / type.block_bytes, what, ": tensor '", t.name,
               "': the byte size overflows");
  return blocks * type.block_bytes;
}

// The header from the first `available` bytes of a file of `total` (NeedMoreBytes when it goes on
// past them); tensor ranges are checked against the whole file.
GgufHeader parse_header(const uint8_t* bytes, size_t available, uint64_t total,
                        const std::string& what) {
  Cursor in(bytes, available, total, what);
  in.need(4, "the magic");
  TESSEL_CHECK(std::memcmp(bytes, "GGUF", 4) == 0, what,
               ": not a GGUF file (the first bytes are not 'GGUF')");
  in.uint(4, "the magic");
  GgufHeader h;
  h.version = in.u32("the version");
  TESSEL_CHECK(h.version == 2 || h.version == 3, what, ": GGUF version ", h.version,
               " is not supported (2 and 3 are)");
  const uint64_t n_tensors = in.u64("the tensor count");
  const uint64_t n_kv = in.u64("the metadata count");
  // A key-value pair takes at least 13 bytes, a tensor info at least 24.
  in.more_unless(n_kv <= in.left() / 13 && n_tensors <= in.left() / 24);
  TESSEL_CHECK(n_kv <= in.left() / 13, what, ": metadata count ", n_kv, " is impossible: only ",
               in.left(), " bytes follow the header");
  TESSEL_CHECK(n_tensors <= in.left() / 24, what, ": tensor count ", n_tensors,
               " is impossible: only ", in.left(), " bytes follow the header");

  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = in.at();
    std::string key = in.str("a metadata key", kGgufMaxKeyBytes);
    TESSEL_CHECK(!key.empty(), what, ": metadata key at offset ", at, " is empty");
    TESSEL_CHECK(!h.metadata.contains(key), what, ": metadata key '", key, "' appears twice");
    const size_t type_at = in.at();
    GgufType type = value_type(in.u32("a value type"), what, key, type_at);
    h.metadata.set(key, read_value(in, type, what, key, 0));
  }
  if (const GgufValue* a = h.metadata.find("general.alignment")) {
    TESSEL_CHECK(a->type == GgufType::U32, what, ": general.alignment must be a u32, got ",
                 gguf_type_name(a->type));
    TESSEL_CHECK(a->uint > 0 && a->uint % 8 == 0, what, ": general.alignment = ", a->uint,
                 " must be a positive multiple of 8");
    h.alignment = a->uint;
  }

  std::map<std::string, size_t> seen;
  h.tensors.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    const size_t at = in.at();
    t.name = in.str("a tensor name", kGgufMaxNameBytes);
    TESSEL_CHECK(seen.emplace(t.name, i).second, what, ": tensor '", t.name, "' appears twice");
    const uint32_t n_dims = in.u32("a tensor's dimension count");
    TESSEL_CHECK(n_dims >= 1 && n_dims <= kGgufMaxDims, what, ": tensor '", t.name, "' (offset ",
                 at, ") has n_dims = ", n_dims, " (1 to ", kGgufMaxDims, " allowed)");
    for (uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(in.u64("a tensor dimension"));
    t.type = in.u32("a tensor type");
    const GgmlTypeInfo* type = ggml_type_info(t.type);
    TESSEL_CHECK(type != nullptr, what, ": tensor '", t.name, "' has unknown ggml type id ",
                 t.type);
    t.nbytes = tensor_bytes(t, *type, what);
    t.offset = in.u64("a tensor offset");
    TESSEL_CHECK(t.offset % h.alignment == 0, what, ": tensor '", t.name, "' offset ", t.offset,
                 " is not a multiple of the alignment ", h.alignment);
    h.tensors.push_back(std::move(t));
  }

  const uint64_t end = in.at();
  h.data_start = end + (h.alignment - end % h.alignment) % h.alignment;
  const uint64_t size = total;
  const uint64_t data_bytes = h.data_start <= size ? size - h.data_start : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : h.tensors) {
    TESSEL_CHECK(t.offset <= data_bytes && t.nbytes <= data_bytes - t.offset, what, ": tensor '",
                 t.name, "' bytes [", t.offset, ", +", t.nbytes, ") lie outside the ", data_bytes,
                 "-byte data section (file size ", size, ")");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    TESSEL_CHECK(by_offset[i]->offset >= prev.offset + prev.nbytes, what, ": tensor '",
                 by_offset[i]->name, "' at offset ", by_offset[i]->offset, " overlaps '", prev.name,
                 "', which ends at ", prev.offset + prev.nbytes);
  }
  return h;
}

}  // namespace

GgufHeader parse_gguf(const uint8_t* bytes, size_t size, const std::string& what) {
  return parse_header(bytes, size, size, what);
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

struct GgufFile::Windows {
  explicit Windows(const std::string& path) : reader(path) {}
  FileReader reader;
  std::mutex mutex;
  std::map<std::string, GgufBytes> kept;  // raw()'s windows, by tensor
};

GgufFile GgufFile::open(const std::string& path, GgufMapping mapping) {
  GgufFile f;
  if (mapping == GgufMapping::Whole) {
    f.file_ = MappedFile::open(path);
    f.header_ = parse_gguf(f.file_->data(), f.file_->size(), path);
  } else {
    // The header alone, read from the front: a generous first read, four times more while the
    // header goes on (a vocabulary of 150k strings is a few MB), the file's size at most.
    f.windows_ = std::make_shared<Windows>(path);
    f.file_ = MappedFile::open_window(f.windows_->reader, 0, 0);  // maps nothing; names the file
    const uint64_t total = f.windows_->reader.size();
    std::vector<uint8_t> head;
    for (uint64_t want = std::min<uint64_t>(total, uint64_t(1) << 20);;
         want = std::min(total, want * 4)) {
      head.resize(size_t(want));
      f.windows_->reader.read_at(0, head.data(), head.size());
      try {
        f.header_ = parse_header(head.data(), head.size(), total, path);
        break;
      } catch (const NeedMoreBytes&) {
      }
    }
  }
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.index_[f.header_.tensors[i].name] = i;
  return f;
}

uint64_t GgufFile::tensor_offset(const GgufTensorInfo& t, uint64_t begin, uint64_t length) const {
  TESSEL_CHECK(begin <= t.nbytes && length <= t.nbytes - begin, path(), ": bytes [", begin, ", +",
               length, ") of tensor '", t.name, "', which has ", t.nbytes);
  return header_.data_start + t.offset + begin;
}

GgufBytes GgufFile::map(const std::string& name, uint64_t begin,
                        std::optional<uint64_t> length) const {
  const GgufTensorInfo& t = info(name);
  const uint64_t n = length.value_or(t.nbytes - std::min(begin, t.nbytes));
  const uint64_t at = tensor_offset(t, begin, n);
  if (!windows_) return {{file_->data() + at, size_t(n)}, file_};
  auto window = MappedFile::open_window(windows_->reader, at, size_t(n));
  return {{window->data(), size_t(n)}, window};
}

void GgufFile::read(const std::string& name, uint64_t begin, void* dst, size_t size) const {
  const uint64_t at = tensor_offset(info(name), begin, size);
  if (!windows_)
    std::memcpy(dst, file_->data() + at, size);
  else
    windows_->reader.read_at(at, dst, size);
}

const GgufTensorInfo& GgufFile::info(const std::string& name) const {
  auto it = index_.find(name);
  TESSEL_CHECK(it != index_.end(), path(), ": no tensor named '", name, "'");
  return header_.tensors[it->second];
}

std::span<const uint8_t> GgufFile::raw(const std::string& name) const {
  if (!windows_) return map(name).bytes;
  std::lock_guard<std::mutex> lock(windows_->mutex);
  auto it = windows_->kept.find(name);
  if (it == windows_->kept.end()) it = windows_->kept.emplace(name, map(name)).first;
  return it->second.bytes;
}

Tensor GgufFile::load(const std::string& name, std::optional<DType> want) const {
  const GgufTensorInfo& t = info(name);
  const GgmlTypeInfo& type = *ggml_type_info(t.type);
  std::optional<DType> stored = dtype_of_ggml(t.type);
  TESSEL_CHECK(stored.has_value() || type.block_size == 1, "tensor ", name, " has type ", type.name,
               ", which this command does not read yet (", path(), ")");
  TESSEL_CHECK(stored.has_value(), path(), ": tensor '", name, "' has type ", type.name,
               ", which tessel cannot load");
  DType target = want.value_or(*stored);
  TESSEL_CHECK(dtype_is_float(target) == dtype_is_float(*stored), path(), ": tensor '", name,
               "' is ", type.name, "; converting it to ", dtype_name(target), " is not supported");
  const GgufBytes bytes = map(name);
  uint8_t* src = const_cast<uint8_t*>(bytes.bytes.data());
  const Shape shape = t.shape();
  bool aligned = reinterpret_cast<uintptr_t>(src) % dtype_size(*stored) == 0;
  if (target == *stored && aligned && t.nbytes > 0) {
    auto keep = bytes.keep;  // the mapping lives as long as any tensor viewing it
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = std::make_shared<Storage>(src, t.nbytes, Device::cpu(), [keep](void*) {});
    impl->shape = shape;
    impl->dtype = target;
    impl->name = name;
    return Tensor(std::move(impl));
  }
  Tensor out = empty(shape, target);
  if (out.numel() > 0) {
    if (target == *stored) {
      std::memcpy(out.data_ptr(), src, t.nbytes);
    } else {
      std::vector<uint8_t> staged(src, src + t.nbytes);  // aligned copy for the converter
      convert_elements(staged.data(), *stored, out.data_ptr(), target, size_t(out.numel()));
    }
  }
  out.set_name(name);
  return out;
}

bool GgufFile::is_zero_copy(const Tensor& t) const {
  const uint8_t* p = static_cast<const uint8_t*>(t.data_ptr());
  if (!windows_) return p >= file_->data() && p < file_->data() + file_->size();
  std::lock_guard<std::mutex> lock(windows_->mutex);
  for (const auto& [name, w] : windows_->kept)
    if (p >= w.bytes.data() && p < w.bytes.data() + w.bytes.size()) return true;
  return false;
}

}  // namespace tessel::io
