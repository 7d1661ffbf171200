// SPDX-License-Identifier: Apache-2.0
#include "tessel/io/safetensors_dir.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace tessel::io {

namespace fs = std::filesystem;

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path, SafetensorsLoad mode) {
  SafetensorsCheckpoint ckpt;
  auto add_file = [&](const std::string& file) {
    ckpt.files_.push_back(SafetensorsFile::open(file, mode));
    for (const std::string& name : ckpt.files_.back().names()) {
      auto [it, inserted] = ckpt.where_.emplace(name, ckpt.files_.size() - 1);
      TESSEL_CHECK(inserted, "tensor '", name, "' appears in both '",
                   ckpt.files_[it->second].path(), "' and '", file, "'");
    }
  };
  if (!fs::is_directory(path)) {
    TESSEL_CHECK(fs::exists(path), "no such file or directory: '", path, "'");
    add_file(path);
    return ckpt;
  }
  fs::path index = fs::path(path) / kSafetensorsIndexName;
  fs::path single = fs::path(path) / kSafetensorsSingleName;
  if (!fs::exists(index)) {
    TESSEL_CHECK(fs::exists(single), "'", path, "' holds neither ", kSafetensorsSingleName, " nor ",
                 kSafetensorsIndexName);
    add_file(single.string());
    return ckpt;
  }
  std::ifstream in(index);
  TESSEL_CHECK(in.good(), "cannot read '", index.string(), "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("'", index.string(), "' is not valid JSON: ", e.what());
  }
  TESSEL_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "'",
               index.string(), "' has no \"weight_map\" object");
  std::set<std::string> shard_names;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    TESSEL_CHECK(it.value().is_string(), "'", index.string(), "': weight_map entry '", it.key(),
                 "' must name a file");
    std::string file = it.value().get<std::string>();
    TESSEL_CHECK(file.find('/') == std::string::npos && file != ".." && !file.empty(), "'",
                 index.string(), "': shard name '", file, "' must be a plain file name");
    shard_names.insert(file);
  }
  for (const std::string& file : shard_names) add_file((fs::path(path) / file).string());
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    auto found = ckpt.where_.find(it.key());
    TESSEL_CHECK(found != ckpt.where_.end(), "'", index.string(), "' maps tensor '", it.key(),
                 "' to '", it.value().get<std::string>(), "', which does not contain it");
    fs::path expected = fs::path(path) / it.value().get<std::string>();
    TESSEL_CHECK(ckpt.files_[found->second].path() == expected.string(), "'", index.string(),
                 "' maps tensor '", it.key(), "' to '", expected.string(), "' but it is in '",
                 ckpt.files_[found->second].path(), "'");
  }
  return ckpt;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> v;
  for (const auto& [name, _] : where_) v.push_back(name);
  return v;
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  auto it = where_.find(name);
  TESSEL_CHECK(it != where_.end(), "checkpoint has no tensor named '", name, "'");
  return files_[it->second].entry(name);
}

Tensor SafetensorsCheckpoint::load(const std::string& name, std::optional<DType> want) const {
  auto it = where_.find(name);
  TESSEL_CHECK(it != where_.end(), "checkpoint has no tensor named '", name, "'");
  return files_[it->second].load(name, want);
}

void SafetensorsCheckpoint::load_into(const std::string& name, const Tensor& dst,
                                      int64_t first) const {
  auto it = where_.find(name);
  TESSEL_CHECK(it != where_.end(), "checkpoint has no tensor named '", name, "'");
  files_[it->second].load_into(name, dst, first);
}

void save_safetensors_dir(const std::string& dir, const NamedTensors& tensors,
                          uint64_t max_shard_bytes,
                          const std::map<std::string, std::string>& metadata) {
  std::vector<StreamedTensor> streamed;
  streamed.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    TESSEL_CHECK(t.device().is_cpu(), "safetensors: tensor '", name, "' is not on the cpu");
    streamed.push_back(streamed_view(name, t));
  }
  save_safetensors_dir(dir, streamed, max_shard_bytes, metadata);
}

void save_safetensors_dir(const std::string& dir, const std::vector<StreamedTensor>& tensors,
                          uint64_t max_shard_bytes,
                          const std::map<std::string, std::string>& metadata) {
  TESSEL_CHECK(max_shard_bytes > 0, "save_safetensors_dir: max_shard_bytes must be positive");
  fs::create_directories(dir);
  // Greedy packing in the given order: a shard closes when the next tensor would overflow it.
  std::vector<std::vector<StreamedTensor>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = t.nbytes();
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  // A stale index or stale shards from an earlier save would shadow the new files.
  fs::remove(fs::path(dir) / kSafetensorsIndexName);
  if (shards.size() == 1) {
    write_safetensors_streamed((fs::path(dir) / kSafetensorsSingleName).string(), shards[0],
                               metadata);
    return;
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors_streamed((fs::path(dir) / name).string(), shards[i], metadata);
    for (const auto& t : shards[i]) index["weight_map"][t.name] = name;
  }
  fs::remove(fs::path(dir) / kSafetensorsSingleName);
  std::string text = index.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / kSafetensorsIndexName).string(), text.data(), text.size());
}

}  // namespace tessel::io
