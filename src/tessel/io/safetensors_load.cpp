// SPDX-License-Identifier: Apache-2.0
// Reading a safetensors file (safetensors.h): opening it mapped or read with pread, and loading a
// tensor, whole or into memory the caller already has.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "tessel/io/safetensors.h"

namespace tessel::io {

namespace {

// Staging for a load that converts: at most this many bytes of stored values at a time.
constexpr size_t kStagingBytes = size_t(1) << 20;

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path, SafetensorsLoad mode) {
  SafetensorsFile f;
  f.path_ = path;
  if (mode == SafetensorsLoad::Map) {
    f.file_ = MappedFile::open(path);
    f.header_ = parse_safetensors(f.file_->data(), f.file_->size(), path);
  } else {
    // Only the length prefix and the header are read here; the size comes from fstat, so a file
    // shorter than its header says is refused as a mapped one is.
    f.reader_ = std::make_shared<FileReader>(path);
    const uint64_t size = f.reader_->size();
    std::array<uint8_t, 8> first{};
    if (size >= 8) f.reader_->read_at(0, first.data(), 8);
    std::vector<uint8_t> prefix(size_t(safetensors_prefix_bytes(first.data(), size)));
    if (!prefix.empty()) f.reader_->read_at(0, prefix.data(), prefix.size());
    f.header_ = parse_safetensors_prefix(prefix.data(), prefix.size(), size, path);
  }
  for (size_t i = 0; i < f.header_.entries.size(); ++i) f.index_[f.header_.entries[i].name] = i;
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> v;
  for (const auto& [name, _] : index_) v.push_back(name);
  return v;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  TESSEL_CHECK(it != index_.end(), path(), ": no tensor named '", name, "'");
  return header_.entries[it->second];
}

Tensor SafetensorsFile::load(const std::string& name, std::optional<DType> want) const {
  const SafetensorsEntry& e = entry(name);
  std::optional<DType> stored = dtype_from_safetensors(e.dtype);
  TESSEL_CHECK(stored.has_value(), path(), ": tensor '", name, "' has dtype ", e.dtype,
               ", which tessel cannot load (F32, F64, BF16, F16, I8, I32, I64)");
  const DType target = want.value_or(*stored);
  if (file_ != nullptr && target == *stored && e.end > e.begin) {
    uint8_t* src = file_->mutable_data() + header_.data_start + e.begin;
    if (reinterpret_cast<uintptr_t>(src) % dtype_size(*stored) == 0) {
      auto keep = file_;  // the mapping lives as long as any tensor viewing it
      auto impl = std::make_shared<TensorImpl>();
      impl->storage =
          std::make_shared<Storage>(src, e.end - e.begin, Device::cpu(), [keep](void*) {});
      impl->shape = e.shape;
      impl->dtype = target;
      impl->name = name;
      return Tensor(std::move(impl));
    }
  }
  Tensor out = empty(e.shape, target);
  load_into(name, out);
  out.set_name(name);
  return out;
}

void SafetensorsFile::load_into(const std::string& name, const Tensor& dst, int64_t first) const {
  const SafetensorsEntry& e = entry(name);
  const std::optional<DType> stored = dtype_from_safetensors(e.dtype);
  TESSEL_CHECK(stored.has_value(), path(), ": tensor '", name, "' has dtype ", e.dtype,
               ", which tessel cannot load (F32, F64, BF16, F16, I8, I32, I64)");
  TESSEL_CHECK(dst.defined() && dst.device().is_cpu(), path(), ": tensor '", name,
               "' can only be loaded into a defined host tensor");
  const DType target = dst.dtype();
  TESSEL_CHECK(dtype_is_float(target) == dtype_is_float(*stored), path(), ": tensor '", name,
               "' is ", e.dtype, "; converting it to ", dtype_name(target), " is not supported");
  const int64_t n = dst.numel();
  TESSEL_CHECK(first >= 0 && n <= e.shape.numel() - first, path(), ": elements [", first, ", ",
               first + n, ") of tensor '", name, "', which has ", e.shape.numel());
  if (n == 0) return;
  const size_t size = dtype_size(*stored);
  const uint64_t at = header_.data_start + e.begin + uint64_t(first) * size;
  // Stored bytes [at, at + count * size) into `out`.
  const auto fetch = [&](uint64_t from, void* out, size_t count) {
    if (reader_ != nullptr)
      reader_->read_at(from, out, count * size);
    else
      std::memcpy(out, file_->data() + from, count * size);
  };
  if (target == *stored) {
    fetch(at, dst.data_ptr(), size_t(n));
    return;
  }
  // Converted a stretch at a time; the staging is 8-byte aligned for the converter.
  const size_t chunk = std::max<size_t>(1, kStagingBytes / size);
  std::vector<uint64_t> staged((std::min(size_t(n), chunk) * size + 7) / 8);
  auto* out = static_cast<uint8_t*>(dst.data_ptr());
  for (int64_t k = 0; k < n; k += int64_t(chunk)) {
    const size_t m = std::min(chunk, size_t(n - k));
    fetch(at + uint64_t(k) * size, staged.data(), m);
    convert_elements(staged.data(), *stored, out + size_t(k) * dtype_size(target), target, m);
  }
}

bool SafetensorsFile::is_zero_copy(const Tensor& t) const {
  if (file_ == nullptr) return false;
  const uint8_t* p = static_cast<const uint8_t*>(t.data_ptr());
  return p >= file_->data() && p < file_->data() + file_->size();
}

uint64_t SafetensorsFile::file_offset(const std::string& name) const {
  return header_.data_start + entry(name).begin;
}

}  // namespace tessel::io
