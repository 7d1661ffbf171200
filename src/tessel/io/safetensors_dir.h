// SPDX-License-Identifier: Apache-2.0
// A model directory in the Hugging Face layout: one `model.safetensors`, or shards
// `model-0000i-of-0000K.safetensors` listed by `model.safetensors.index.json`
// ({"metadata": {"total_size": N}, "weight_map": {tensor: file}}). Tensors are looked up by name
// across all shards.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessel/io/safetensors.h"

namespace tessel::io {

inline constexpr const char* kSafetensorsSingleName = "model.safetensors";
inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";

class SafetensorsCheckpoint {
 public:
  // `path` is a directory (single file or index + shards) or one .safetensors file.
  static SafetensorsCheckpoint open(const std::string& path,
                                    SafetensorsLoad mode = SafetensorsLoad::Map);

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  Tensor load(const std::string& name, std::optional<DType> want = std::nullopt) const;
  // SafetensorsFile::load_into on the file that holds `name`.
  void load_into(const std::string& name, const Tensor& dst, int64_t first = 0) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// Writes tensors into `dir` (created if missing): one model.safetensors when they fit in
// `max_shard_bytes`, else shards plus the index. Every file is written atomically.
void save_safetensors_dir(const std::string& dir, const NamedTensors& tensors,
                          uint64_t max_shard_bytes = uint64_t(5) << 30,
                          const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
// The same with tensors produced while their file is written (write_safetensors_streamed).
void save_safetensors_dir(const std::string& dir, const std::vector<StreamedTensor>& tensors,
                          uint64_t max_shard_bytes = uint64_t(5) << 30,
                          const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace tessel::io
