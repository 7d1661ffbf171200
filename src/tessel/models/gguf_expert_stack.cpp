// SPDX-License-Identifier: Apache-2.0
// Expert stacks stored whole or one tensor per expert (gguf_expert_stack.h).
#include "tessel/models/gguf_expert_stack.h"

#include <algorithm>
#include <cstring>
#include <regex>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel::models {

std::vector<std::string> gguf_expert_names(const std::string& stacked, int64_t experts) {
  static const std::regex kStack(R"((blk\.\d+\.\w+)_exps\.(weight|bias))");
  std::smatch m;
  if (experts <= 0 || !std::regex_match(stacked, m, kStack)) return {};
  std::vector<std::string> names;
  for (int64_t e = 0; e < experts; ++e)
    names.push_back(m[1].str() + "." + std::to_string(e) + "." + m[2].str());
  return names;
}

std::optional<GgufStored> find_gguf_stored(const io::GgufFile& file, const std::string& stored,
                                           const Shape& shape, std::set<std::string>& wanted,
                                           std::vector<std::string>& missing,
                                           std::vector<std::string>& mismatched) {
  auto mis_shaped = [&](const std::string& name, const Shape& want, const Shape& got) {
    std::ostringstream s;
    s << name << " (expected " << want << ", got " << got << ")";
    mismatched.push_back(s.str());
  };
  const std::vector<std::string> pieces = file.contains(stored) || shape.ndim() != 3
                                              ? std::vector<std::string>{}
                                              : gguf_expert_names(stored, shape[0]);
  if (pieces.empty() || !file.contains(pieces[0])) {  // stored whole (or absent)
    wanted.insert(stored);
    if (!file.contains(stored)) {
      std::ostringstream s;
      s << stored << " " << shape;
      missing.push_back(s.str());
      return std::nullopt;
    }
    if (file.info(stored).shape() != shape) {
      mis_shaped(stored, shape, file.info(stored).shape());
      return std::nullopt;
    }
    return GgufStored{stored, 0, {}};
  }
  // One tensor per expert: each [out, in], all of expert 0's type.
  const Shape piece({shape[1], shape[2]});
  const uint32_t type = file.info(pieces[0]).type;
  bool whole = true;
  for (const std::string& name : pieces) {
    wanted.insert(name);
    if (!file.contains(name)) {
      std::ostringstream s;
      s << name << " " << piece << " (expert of " << stored << ")";
      missing.push_back(s.str());
      whole = false;
    } else if (file.info(name).shape() != piece) {
      mis_shaped(name, piece, file.info(name).shape());
      whole = false;
    } else if (file.info(name).type != type) {
      mismatched.push_back(name + " (" + io::ggml_type_name(file.info(name).type) + " where " +
                           pieces[0] + " is " + io::ggml_type_name(type) +
                           ": a stack's experts must share one type)");
      whole = false;
    }
  }
  if (!whole) return std::nullopt;
  return GgufStored{stored, 0, pieces};
}

io::GgufTensorInfo gguf_stored_info(const io::GgufFile& file, const GgufStored& stored) {
  if (stored.experts.empty()) return file.info(stored.name);
  const io::GgufTensorInfo& first = file.info(stored.experts[0]);
  io::GgufTensorInfo info;
  info.name = stored.name;
  info.dims = first.dims;
  info.dims.push_back(uint64_t(stored.experts.size()));
  info.type = first.type;
  info.nbytes = first.nbytes * stored.experts.size();
  return info;
}

io::GgufBytes gguf_stored_bytes(const io::GgufFile& file, const GgufStored& stored, uint64_t begin,
                                std::optional<uint64_t> length) {
  if (stored.experts.empty()) return file.map(stored.name, begin, length);
  const uint64_t each = file.info(stored.experts[0]).nbytes;
  const uint64_t total = each * stored.experts.size();
  const uint64_t n = length.value_or(total - std::min(begin, total));
  TESSEL_CHECK(begin <= total && n <= total - begin, file.path(), ": bytes [", begin, ", ",
               begin + n, ") of ", stored.name, " (", stored.experts.size(),
               " experts' tensors of ", each, " bytes) are out of range");
  const uint64_t expert = each ? begin / each : 0;
  if (n == 0 || (begin + n - 1) / each == expert)  // within one expert: a view of its tensor
    return file.map(stored.experts[size_t(expert)], begin - expert * each, n);
  auto copy = std::make_shared<std::vector<uint8_t>>(size_t(n));
  gguf_stored_read(file, stored, begin, copy->data(), size_t(n));
  const std::span<const uint8_t> bytes(copy->data(), copy->size());
  return io::GgufBytes{bytes, std::move(copy)};
}

void gguf_stored_read(const io::GgufFile& file, const GgufStored& stored, uint64_t begin, void* dst,
                      size_t size) {
  if (stored.experts.empty()) return file.read(stored.name, begin, dst, size);
  const uint64_t each = file.info(stored.experts[0]).nbytes, end = begin + size;
  TESSEL_CHECK(end >= begin && end <= each * stored.experts.size(), file.path(), ": bytes [", begin,
               ", ", end, ") of ", stored.name, " (", stored.experts.size(),
               " experts' tensors of ", each, " bytes) are out of range");
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t at = begin; at < end;) {
    const uint64_t e = at / each, within = at - e * each, k = std::min(each - within, end - at);
    file.read(stored.experts[size_t(e)], within, out + (at - begin), size_t(k));
    at += k;
  }
}

Tensor gguf_stored_load(const io::GgufFile& file, const GgufStored& stored, DType want) {
  if (stored.experts.empty()) return file.load(stored.name, want);
  Tensor out = empty(gguf_stored_info(file, stored).shape(), want);
  auto* to = static_cast<uint8_t*>(out.data_ptr());
  for (const std::string& name : stored.experts) {
    const Tensor expert = file.load(name, want);
    std::memcpy(to, expert.data_ptr(), expert.nbytes());
    to += expert.nbytes();
  }
  return out;
}

}  // namespace tessel::models
