// SPDX-License-Identifier: Apache-2.0
#include "tessel/io/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace tessel::io {

namespace {

using nlohmann::json;

// Bits per element of every dtype the format defines (so valid files using dtypes tessel does not
// compute in still validate; loading those tensors is refused).
int safetensors_bits(const std::string& dtype) {
  static const std::map<std::string, int> kBits = {
      {"BOOL", 8},    {"U8", 8},          {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},
      {"F16", 16},    {"BF16", 16},       {"I32", 32},        {"U32", 32},    {"F32", 32},
      {"C64", 64},    {"F64", 64},        {"I64", 64},        {"U64", 64},    {"F4", 4},
      {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  auto it = kBits.find(dtype);
  return it == kBits.end() ? 0 : it->second;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t json_u64(const json& v, const std::string& what, const std::string& name,
                  const char* field) {
  TESSEL_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), what,
               ": tensor '", name, "': ", field, " must hold non-negative integers, got ",
               v.dump());
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const json& info, const std::string& what) {
  TESSEL_CHECK(info.is_object(), what, ": tensor '", name, "': expected an object, got ",
               info.dump());
  for (auto it = info.begin(); it != info.end(); ++it)
    TESSEL_CHECK(it.key() == "dtype" || it.key() == "shape" || it.key() == "data_offsets", what,
                 ": tensor '", name, "': unknown key '", it.key(), "'");
  TESSEL_CHECK(info.contains("dtype") && info["dtype"].is_string(), what, ": tensor '", name,
               "': missing string 'dtype'");
  TESSEL_CHECK(info.contains("shape") && info["shape"].is_array(), what, ": tensor '", name,
               "': missing array 'shape'");
  TESSEL_CHECK(info.contains("data_offsets") && info["data_offsets"].is_array() &&
                   info["data_offsets"].size() == 2,
               what, ": tensor '", name, "': 'data_offsets' must be [begin, end]");
  SafetensorsEntry e;
  e.name = name;
  e.dtype = info["dtype"].get<std::string>();
  int bits = safetensors_bits(e.dtype);
  TESSEL_CHECK(bits > 0, what, ": tensor '", name, "': unknown dtype '", e.dtype, "'");
  TESSEL_CHECK(info["shape"].size() <= size_t(Shape::kMaxDims), what, ": tensor '", name,
               "': ", info["shape"].size(), " dims, at most ", Shape::kMaxDims, " supported");
  // numel * bits with overflow checks: a hostile shape must not wrap around to a small size.
  unsigned __int128 total_bits = unsigned(bits);
  std::vector<int64_t> dims;
  for (const json& d : info["shape"]) {
    uint64_t v = json_u64(d, what, name, "shape");
    TESSEL_CHECK(v <= uint64_t(std::numeric_limits<int64_t>::max()), what, ": tensor '", name,
                 "': dimension ", v, " too large");
    dims.push_back(int64_t(v));
    total_bits *= v;
    TESSEL_CHECK(total_bits <= (unsigned __int128)(std::numeric_limits<uint64_t>::max()), what,
                 ": tensor '", name, "': shape ", info["shape"].dump(), " overflows");
  }
  e.shape = Shape(dims);
  e.begin = json_u64(info["data_offsets"][0], what, name, "data_offsets");
  e.end = json_u64(info["data_offsets"][1], what, name, "data_offsets");
  TESSEL_CHECK(e.begin <= e.end, what, ": tensor '", name, "': data_offsets [", e.begin, ", ",
               e.end, "] end before begin");
  TESSEL_CHECK(total_bits % 8 == 0, what, ": tensor '", name, "': ", uint64_t(total_bits),
               " bits is not a whole number of bytes");
  uint64_t bytes = uint64_t(total_bits / 8);
  TESSEL_CHECK(e.end - e.begin == bytes, what, ": tensor '", name, "': shape ", e.shape, " of ",
               e.dtype, " needs ", bytes, " bytes but data_offsets [", e.begin, ", ", e.end,
               "] hold ", e.end - e.begin);
  return e;
}

}  // namespace

std::optional<DType> dtype_from_safetensors(const std::string& name) {
  if (name == "F32") return DType::F32;
  if (name == "F64") return DType::F64;
  if (name == "BF16") return DType::BF16;
  if (name == "F16") return DType::F16;
  if (name == "I8") return DType::I8;
  if (name == "I32") return DType::I32;
  if (name == "I64") return DType::I64;
  return std::nullopt;
}

std::string safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I8:
      return "I8";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
  }
  TESSEL_FAIL("safetensors: invalid dtype ", int(dtype));
}

SafetensorsHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& what) {
  return parse_safetensors_prefix(bytes, size, size, what);
}

uint64_t safetensors_prefix_bytes(const uint8_t* first8, uint64_t file_size) {
  if (file_size < 8) return file_size;
  const uint64_t n = read_u64_le(first8);
  return n <= kSafetensorsMaxHeader && n <= file_size - 8 ? 8 + n : 8;
}

SafetensorsHeader parse_safetensors_prefix(const uint8_t* bytes, size_t have, uint64_t size,
                                           const std::string& what) {
  TESSEL_CHECK(size >= 8, what, ": ", size,
               " bytes is too short for a safetensors file (need 8 for the header length)");
  TESSEL_CHECK(have >= 8 && have <= size, what, ": ", have, " bytes given of a ", size,
               "-byte file; the first 8 at least are needed");
  uint64_t n = read_u64_le(bytes);
  TESSEL_CHECK(n <= kSafetensorsMaxHeader, what, ": header length ", n, " exceeds the limit of ",
               kSafetensorsMaxHeader, " bytes");
  TESSEL_CHECK(n <= size - 8, what, ": header length ", n, " runs past the end of the file (", size,
               " bytes)");
  TESSEL_CHECK(have >= 8 + n, what, ": the header needs bytes [8, ", 8 + n, "), only ", have,
               " were read");
  TESSEL_CHECK(n >= 2 && bytes[8] == '{', what, ": header must be a JSON object starting with '{'");

  // Duplicate names are an error, but a JSON object keeps only the last: catch them while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  try {
    header = json::parse(text, text + n, on_event);
  } catch (const json::exception& e) {
    TESSEL_FAIL(what, ": header is not valid JSON: ", e.what());
  }
  TESSEL_CHECK(duplicate.empty(), what, ": tensor name '", duplicate,
               "' appears twice in the header");
  TESSEL_CHECK(header.is_object(), what, ": header must be a JSON object");

  SafetensorsHeader out;
  out.data_start = 8 + n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      TESSEL_CHECK(it.value().is_object(), what, ": __metadata__ must map strings to strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        TESSEL_CHECK(m.value().is_string(), what, ": __metadata__ value of '", m.key(),
                     "' must be a string, got ", m.value().dump());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    out.entries.push_back(parse_entry(it.key(), it.value(), what));
  }

  // The buffer must be covered exactly: sorted by offset, each tensor starts where the last ended.
  std::sort(out.entries.begin(), out.entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t buffer = size - out.data_start, at = 0;
  for (const SafetensorsEntry& e : out.entries) {
    TESSEL_CHECK(e.end <= buffer, what, ": tensor '", e.name, "' data_offsets [", e.begin, ", ",
                 e.end, "] lie outside the ", buffer, "-byte data buffer");
    TESSEL_CHECK(e.begin >= at, what, ": tensor '", e.name, "' [", e.begin, ", ", e.end,
                 ") overlaps the previous tensor, which ends at ", at);
    TESSEL_CHECK(e.begin == at, what, ": hole in the data buffer: bytes [", at, ", ", e.begin,
                 ") belong to no tensor (before '", e.name, "')");
    at = e.end;
  }
  TESSEL_CHECK(at == buffer, what, ": the data buffer has ", buffer,
               " bytes but the tensors cover ", at);
  return out;
}

namespace {

// The reference writer's order: larger element size first (keeps every tensor aligned), then name.
// Returns the header text (padded so the data buffer starts 8-byte aligned) and fills `order`.
std::string layout_header(const std::vector<StreamedTensor>& tensors,
                          const std::map<std::string, std::string>& metadata,
                          std::vector<const StreamedTensor*>& order) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    TESSEL_CHECK(names.insert(t.name).second, "safetensors: tensor name '", t.name,
                 "' given twice");
    TESSEL_CHECK(t.name != "__metadata__", "safetensors: '__metadata__' is reserved");
    order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const StreamedTensor* t : order) {
    header[t->name] = {{"dtype", safetensors_dtype_name(t->dtype)},
                       {"shape", t->shape.to_vector()},
                       {"data_offsets", {offset, offset + t->nbytes()}}};
    offset += t->nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::vector<StreamedTensor> views_of(const NamedTensors& tensors) {
  std::vector<StreamedTensor> out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    TESSEL_CHECK(t.device().is_cpu(), "safetensors: tensor '", name, "' is not on the cpu");
    out.push_back(streamed_view(name, t));
  }
  return out;
}

// The 8-byte little-endian header length.
std::array<uint8_t, 8> length_prefix(uint64_t n) {
  std::array<uint8_t, 8> out{};
  for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(n >> (8 * i));
  return out;
}

}  // namespace

StreamedTensor streamed_view(const std::string& name, const Tensor& t) {
  return {name, t.dtype(), t.shape(), [t](const ByteSink& sink) {
            if (t.nbytes() > 0) sink(t.data_ptr(), t.nbytes());
          }};
}

std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  const std::vector<StreamedTensor> streamed = views_of(tensors);
  std::vector<const StreamedTensor*> order;
  const std::string text = layout_header(streamed, metadata, order);
  uint64_t size = 8 + text.size();
  for (const StreamedTensor* t : order) size += t->nbytes();
  std::vector<uint8_t> out(size);
  const auto prefix = length_prefix(text.size());
  std::memcpy(out.data(), prefix.data(), prefix.size());
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t at = 8 + text.size();
  for (const StreamedTensor* t : order)
    t->write([&](const void* p, size_t n) {
      std::memcpy(out.data() + at, p, n);
      at += n;
    });
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_safetensors_streamed(path, views_of(tensors), metadata);
}

void write_safetensors_streamed(const std::string& path, const std::vector<StreamedTensor>& tensors,
                                const std::map<std::string, std::string>& metadata) {
  std::vector<const StreamedTensor*> order;
  const std::string text = layout_header(tensors, metadata, order);
  AtomicFileWriter out(path);
  const auto prefix = length_prefix(text.size());
  out.write(prefix.data(), prefix.size());
  out.write(text.data(), text.size());
  for (const StreamedTensor* t : order) {
    const uint64_t begin = out.written();
    t->write([&](const void* p, size_t n) {
      TESSEL_CHECK(out.written() - begin + n <= t->nbytes(), "safetensors: tensor '", t->name,
                   "' produced more than its ", t->nbytes(), " bytes");
      out.write(p, n);
    });
    TESSEL_CHECK(out.written() - begin == t->nbytes(), "safetensors: tensor '", t->name,
                 "' produced ", out.written() - begin, " of its ", t->nbytes(), " bytes");
  }
  out.commit();
}

}  // namespace tessel::io
