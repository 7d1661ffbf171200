// SPDX-License-Identifier: Apache-2.0
// GGUF's vocabulary: the metadata value types, the ggml tensor types with their block geometry,
// GgufValue's constructors and checked accessors, the ordered metadata map, tensor infos and the
// tensors handed to the writer.
#include <cmath>
#include <limits>

#include "tessel/io/gguf.h"

namespace tessel::io {

namespace {

// Every assigned ggml type id, with elements and bytes per block. Ids 4, 5, 31-33 and 36-38 were
// assigned once and later removed; a file using them is refused like any unknown id.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64 ||
         t == GgufType::Bool;
}
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8:
      return "u8";
    case GgufType::I8:
      return "i8";
    case GgufType::U16:
      return "u16";
    case GgufType::I16:
      return "i16";
    case GgufType::U32:
      return "u32";
    case GgufType::I32:
      return "i32";
    case GgufType::F32:
      return "f32";
    case GgufType::Bool:
      return "bool";
    case GgufType::String:
      return "string";
    case GgufType::Array:
      return "array";
    case GgufType::U64:
      return "u64";
    case GgufType::I64:
      return "i64";
    case GgufType::F64:
      return "f64";
  }
  return "unknown";
}

GgufValue GgufValue::of(GgufType type, uint64_t u) {
  TESSEL_CHECK(is_unsigned(type), "GgufValue::of: ", gguf_type_name(type), " is not unsigned");
  GgufValue v;
  v.type = type;
  v.uint = u;
  return v;
}

GgufValue GgufValue::of_int(GgufType type, int64_t i) {
  TESSEL_CHECK(is_signed(type), "GgufValue::of_int: ", gguf_type_name(type), " is not signed");
  GgufValue v;
  v.type = type;
  v.sint = i;
  return v;
}

GgufValue GgufValue::of_float(GgufType type, double d) {
  TESSEL_CHECK(type == GgufType::F32 || type == GgufType::F64,
               "GgufValue::of_float: ", gguf_type_name(type), " is not a float type");
  GgufValue v;
  v.type = type;
  v.real = type == GgufType::F32 ? double(float(d)) : d;
  return v;
}

GgufValue GgufValue::of_string(std::string s) {
  GgufValue v;
  v.type = GgufType::String;
  v.str = std::move(s);
  return v;
}

GgufValue GgufValue::of_array(GgufType elem, std::vector<GgufValue> items) {
  for (const GgufValue& item : items)
    TESSEL_CHECK(item.type == elem, "GgufValue::of_array: an element is ",
                 gguf_type_name(item.type), ", the array holds ", gguf_type_name(elem));
  GgufValue v;
  v.type = GgufType::Array;
  v.elem = elem;
  v.items = std::move(items);
  return v;
}

GgufValue GgufValue::of_strings(const std::vector<std::string>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (const std::string& s : items) values.push_back(of_string(s));
  return of_array(GgufType::String, std::move(values));
}

bool GgufValue::is_integer() const {
  return (is_unsigned(type) && type != GgufType::Bool) || is_signed(type);
}

int64_t GgufValue::as_int(const std::string& what) const {
  if (is_signed(type)) return sint;
  TESSEL_CHECK(is_unsigned(type) && type != GgufType::Bool, what, " must be an integer, got ",
               gguf_type_name(type));
  TESSEL_CHECK(uint <= uint64_t(std::numeric_limits<int64_t>::max()), what, " = ", uint,
               " is out of range");
  return int64_t(uint);
}

double GgufValue::as_double(const std::string& what) const {
  if (type == GgufType::F32 || type == GgufType::F64) return real;
  return double(as_int(what));
}

bool GgufValue::as_bool(const std::string& what) const {
  TESSEL_CHECK(type == GgufType::Bool, what, " must be a bool, got ", gguf_type_name(type));
  return uint != 0;
}

const std::string& GgufValue::as_string(const std::string& what) const {
  TESSEL_CHECK(type == GgufType::String, what, " must be a string, got ", gguf_type_name(type));
  return str;
}

const std::vector<GgufValue>& GgufValue::as_array(const std::string& what) const {
  TESSEL_CHECK(type == GgufType::Array, what, " must be an array, got ", gguf_type_name(type));
  return items;
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  switch (type) {
    case GgufType::String:
      return str == o.str;
    case GgufType::Array:
      return elem == o.elem && items == o.items;
    case GgufType::F32:
    case GgufType::F64:
      // Bitwise, so a NaN read back equals the NaN written.
      return real == o.real || (std::isnan(real) && std::isnan(o.real));
    default:
      return uint == o.uint && sint == o.sint;
  }
}

void GgufMetadata::set(const std::string& key, GgufValue value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_[key] = entries_.size();
  entries_.emplace_back(key, std::move(value));
}

const GgufValue* GgufMetadata::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const GgufValue& GgufMetadata::at(const std::string& key, const std::string& what) const {
  const GgufValue* v = find(key);
  TESSEL_CHECK(v != nullptr, what, ": metadata key '", key, "' is missing");
  return *v;
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::string ggml_type_name(uint32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t ? std::string(t->name) : "type " + std::to_string(id);
}

uint32_t ggml_type_of(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return ggml::kF32;
    case DType::F16:
      return ggml::kF16;
    case DType::BF16:
      return ggml::kBF16;
    case DType::F64:
      return 28;
    case DType::I8:
      return 24;
    case DType::I32:
      return 26;
    case DType::I64:
      return 27;
  }
  TESSEL_FAIL("GGUF: no ggml type for dtype ", dtype_name(dtype));
}

std::optional<DType> dtype_of_ggml(uint32_t id) {
  for (DType d : kAllDTypes)
    if (ggml_type_of(d) == id) return d;
  return std::nullopt;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (uint64_t d : dims) n *= int64_t(d);  // bounded by the reader's overflow check
  return n;
}

Shape GgufTensorInfo::shape() const {
  std::vector<int64_t> s(dims.rbegin(), dims.rend());
  return Shape(s);
}

GgufTensorOut GgufTensorOut::from_tensor(const std::string& name, const Tensor& t) {
  TESSEL_CHECK(t.device().is_cpu(), "GGUF: tensor '", name, "' is not on the cpu");
  GgufTensorOut out;
  out.name = name;
  for (int d = t.ndim() - 1; d >= 0; --d) out.dims.push_back(uint64_t(t.size(d)));
  if (out.dims.empty()) out.dims.push_back(1);  // a scalar is one element
  out.type = ggml_type_of(t.dtype());
  out.tensor = t;
  return out;
}

const uint8_t* GgufTensorOut::data() const {
  return tensor.defined() ? static_cast<const uint8_t*>(tensor.data_ptr()) : bytes.data();
}

size_t GgufTensorOut::size() const {
  return tensor.defined() ? tensor.nbytes() : bytes.size();
}

}  // namespace tessel::io
