// SPDX-License-Identifier: Apache-2.0
// The GGUF writer (version 3, little-endian): header, metadata in the order given, tensor infos
// in the order given, then the data section with each tensor at a multiple of the alignment and
// zero padding between. What it is given is checked as the reader checks a file, so tessel never
// writes a file it would refuse to read.
#include <cstring>
#include <set>

#include "tessel/io/gguf.h"

namespace tessel::io {

namespace {

class Sink {
 public:
  explicit Sink(std::vector<uint8_t>& out) : out_(out) {}
  void uint(uint64_t v, int nbytes) {
    for (int i = 0; i < nbytes; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  }
  void str(const std::string& s) {
    uint(s.size(), 8);
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void value(const GgufValue& v, int depth) {
    switch (v.type) {
      case GgufType::U8:
      case GgufType::Bool:
        uint(v.uint, 1);
        break;
      case GgufType::U16:
        uint(v.uint, 2);
        break;
      case GgufType::U32:
        uint(v.uint, 4);
        break;
      case GgufType::U64:
        uint(v.uint, 8);
        break;
      case GgufType::I8:
        uint(uint64_t(v.sint), 1);
        break;
      case GgufType::I16:
        uint(uint64_t(v.sint), 2);
        break;
      case GgufType::I32:
        uint(uint64_t(v.sint), 4);
        break;
      case GgufType::I64:
        uint(uint64_t(v.sint), 8);
        break;
      case GgufType::F32: {
        float f = float(v.real);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        uint(bits, 4);
        break;
      }
      case GgufType::F64: {
        uint64_t bits;
        std::memcpy(&bits, &v.real, 8);
        uint(bits, 8);
        break;
      }
      case GgufType::String:
        str(v.str);
        break;
      case GgufType::Array:
        TESSEL_CHECK(depth < kGgufMaxArrayNesting, "GGUF writer: arrays nest deeper than ",
                     kGgufMaxArrayNesting, " levels");
        uint(uint32_t(v.elem), 4);
        uint(v.items.size(), 8);
        for (const GgufValue& item : v.items) {
          TESSEL_CHECK(item.type == v.elem, "GGUF writer: an array of ", gguf_type_name(v.elem),
                       " holds a ", gguf_type_name(item.type));
          value(item, depth + 1);
        }
        break;
    }
  }
  void pad_to(uint64_t alignment) {
    out_.resize(out_.size() + (alignment - out_.size() % alignment) % alignment, 0);
  }

 private:
  std::vector<uint8_t>& out_;
};

uint64_t expected_bytes(const GgufTensorOut& t) {
  const GgmlTypeInfo* type = ggml_type_info(t.type);
  TESSEL_CHECK(type != nullptr, "GGUF writer: tensor '", t.name, "' has unknown ggml type id ",
               t.type);
  TESSEL_CHECK(!t.dims.empty() && t.dims.size() <= kGgufMaxDims, "GGUF writer: tensor '", t.name,
               "' has ", t.dims.size(), " dims (1 to ", kGgufMaxDims, " allowed)");
  TESSEL_CHECK(t.dims[0] % type->block_size == 0, "GGUF writer: tensor '", t.name, "' rows of ",
               t.dims[0], " elements are not a multiple of ", type->name, "'s block size ",
               type->block_size);
  uint64_t numel = 1;
  for (uint64_t d : t.dims) numel *= d;
  return numel / type->block_size * type->block_bytes;
}

// The header (magic to the padding before the data) and where each tensor goes in the data.
struct Layout {
  std::vector<uint8_t> header;
  std::vector<uint64_t> offsets;
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t data_size = 0;  // with the padding after the last tensor
};

Layout layout_of(const GgufMetadata& metadata, const std::vector<GgufTensorOut>& tensors) {
  Layout l;
  if (const GgufValue* a = metadata.find("general.alignment")) {
    TESSEL_CHECK(a->type == GgufType::U32 && a->uint > 0 && a->uint % 8 == 0,
                 "GGUF writer: general.alignment must be a u32 multiple of 8");
    l.alignment = a->uint;
  }
  std::set<std::string> names;
  for (const GgufTensorOut& t : tensors) {
    TESSEL_CHECK(!t.name.empty() && t.name.size() <= kGgufMaxNameBytes,
                 "GGUF writer: tensor name '", t.name, "' must have 1 to ", kGgufMaxNameBytes,
                 " bytes");
    TESSEL_CHECK(names.insert(t.name).second, "GGUF writer: tensor '", t.name, "' given twice");
    const uint64_t want = expected_bytes(t);
    TESSEL_CHECK(t.size() == want, "GGUF writer: tensor '", t.name, "' has ", t.size(),
                 " bytes; its dims and type need ", want);
    l.offsets.push_back(l.data_size);
    l.data_size += want;
    l.data_size += (l.alignment - l.data_size % l.alignment) % l.alignment;
  }

  Sink sink(l.header);
  l.header.insert(l.header.end(), {'G', 'G', 'U', 'F'});
  sink.uint(3, 4);
  sink.uint(tensors.size(), 8);
  sink.uint(metadata.size(), 8);
  for (const auto& [key, value] : metadata.entries()) {
    TESSEL_CHECK(!key.empty() && key.size() <= kGgufMaxKeyBytes, "GGUF writer: metadata key '", key,
                 "' must have 1 to ", kGgufMaxKeyBytes, " bytes");
    sink.str(key);
    sink.uint(uint32_t(value.type), 4);
    sink.value(value, 0);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorOut& t = tensors[i];
    sink.str(t.name);
    sink.uint(t.dims.size(), 4);
    for (uint64_t d : t.dims) sink.uint(d, 8);
    sink.uint(t.type, 4);
    sink.uint(l.offsets[i], 8);
  }
  sink.pad_to(l.alignment);
  return l;
}

}  // namespace

std::vector<uint8_t> serialize_gguf(const GgufMetadata& metadata,
                                    const std::vector<GgufTensorOut>& tensors) {
  Layout l = layout_of(metadata, tensors);
  std::vector<uint8_t> out = std::move(l.header);
  const size_t data_start = out.size();
  out.resize(data_start + l.data_size, 0);
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].size() > 0)
      std::memcpy(out.data() + data_start + l.offsets[i], tensors[i].data(), tensors[i].size());
  return out;
}

void save_gguf(const std::string& path, const GgufMetadata& metadata,
               const std::vector<GgufTensorOut>& tensors) {
  // The tensors are written from where they are: only the header is assembled in memory.
  const Layout l = layout_of(metadata, tensors);
  const std::vector<uint8_t> zeros(l.alignment, 0);
  std::vector<std::span<const uint8_t>> pieces = {l.header};
  uint64_t at = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    pieces.emplace_back(tensors[i].data(), tensors[i].size());
    at = l.offsets[i] + tensors[i].size();
    const uint64_t next = i + 1 < tensors.size() ? l.offsets[i + 1] : l.data_size;
    pieces.emplace_back(zeros.data(), size_t(next - at));
  }
  write_file_atomic(path, pieces);
}

}  // namespace tessel::io
