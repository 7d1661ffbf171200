// SPDX-License-Identifier: Apache-2.0
// TokenDataset (shards of a split as one stream) and TokenLoader (seeded window order with an
// exact position). The order of an epoch depends only on (seed, epoch, windows), so a resumed
// loader reproduces the batches of an uninterrupted one.
#include "tessel/io/token_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "tessel/core/error.h"
#include "tessel/core/rng.h"

namespace tessel::io {

TokenDataset::TokenDataset(const std::vector<std::string>& shard_paths, bool verify) {
  TESSEL_CHECK(!shard_paths.empty(), "token dataset: no shards given");
  for (const std::string& path : shard_paths) {
    TokenShard shard = TokenShard::open(path, verify);
    if (shards_.empty()) vocab_size_ = shard.vocab_size();
    TESSEL_CHECK(shard.vocab_size() == vocab_size_, "token dataset: shard '", path,
                 "' has a vocabulary of ", shard.vocab_size(), ", the first shard ", vocab_size_);
    starts_.push_back(total_);
    total_ += shard.size();
    shards_.push_back(std::move(shard));
  }
}

TokenDataset TokenDataset::open(const std::string& dir, const std::string& split, bool verify) {
  namespace fs = std::filesystem;
  const fs::path manifest_path = fs::path(dir) / "manifest.json";
  std::ifstream in(manifest_path);
  TESSEL_CHECK(in.good(), "token dataset: no manifest at '", manifest_path.string(),
               "' (prepare the directory with `tessel data prepare`; a preparation that did not "
               "finish leaves none)");
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("token dataset: manifest '", manifest_path.string(), "' is not JSON: ", e.what());
  }
  const auto splits = manifest.find("splits");
  TESSEL_CHECK(splits != manifest.end() && splits->is_object() && splits->contains(split),
               "token dataset: manifest '", manifest_path.string(), "' has no split '", split, "'");
  const nlohmann::json& entry = (*splits)[split];
  TESSEL_CHECK(entry.contains("shards") && entry["shards"].is_array() && !entry["shards"].empty(),
               "token dataset: split '", split, "' of '", manifest_path.string(),
               "' has no shards (prepared with --val-fraction 0?)");
  std::vector<std::string> paths;
  for (const auto& s : entry["shards"]) paths.push_back((fs::path(dir) / s.at("file")).string());
  TokenDataset data(paths, verify);
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto& s = entry["shards"][i];
    const TokenShardInfo& info = data.shards_[i].info();
    std::ostringstream hex;
    hex << std::hex << info.checksum;
    TESSEL_CHECK(s.at("tokens").get<int64_t>() == info.tokens &&
                     s.at("checksum").get<std::string>() == hex.str(),
                 "token dataset: shard '", paths[i], "' does not match the manifest (", info.tokens,
                 " tokens, checksum ", hex.str(), " vs ", s.dump(),
                 "): the directory mixes two preparations");
  }
  return data;
}

bool TokenDataset::declares_split(const std::string& dir, const std::string& split) {
  std::ifstream in(std::filesystem::path(dir) / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) return false;
  const auto splits = manifest.find("splits");
  if (splits == manifest.end() || !splits->is_object() || !splits->contains(split)) return false;
  const nlohmann::json& entry = (*splits)[split];
  return entry.is_object() && entry.contains("shards") && entry["shards"].is_array() &&
         !entry["shards"].empty();
}

void TokenDataset::read(int64_t start, int64_t count, int64_t* out) const {
  TESSEL_CHECK(start >= 0 && count >= 0 && start + count <= total_, "token dataset: read of [",
               start, ", ", start + count, ") outside [0, ", total_, ")");
  size_t s = size_t(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
  while (count > 0) {
    const int64_t local = start - starts_[s];
    const int64_t n = std::min(count, shards_[s].size() - local);
    shards_[s].read(local, n, out);
    out += n;
    start += n;
    count -= n;
    ++s;
  }
}

std::string LoaderPosition::to_json() const {
  return nlohmann::json{{"seed", seed}, {"epoch", epoch}, {"index", index}, {"windows", windows}}
      .dump();
}

LoaderPosition LoaderPosition::from_json(std::string_view text) {
  try {
    const auto j = nlohmann::json::parse(text);
    LoaderPosition p;
    p.seed = j.at("seed").get<uint64_t>();
    p.epoch = j.at("epoch").get<int64_t>();
    p.index = j.at("index").get<int64_t>();
    p.windows = j.at("windows").get<int64_t>();
    return p;
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("loader position: cannot read '", text, "': ", e.what());
  }
}

TokenLoader::TokenLoader(std::shared_ptr<const TokenDataset> data, const LoaderOptions& options)
    : data_(std::move(data)), options_(options) {
  TESSEL_CHECK(data_ != nullptr, "token loader: no dataset");
  TESSEL_CHECK(options_.batch >= 1 && options_.seq_len >= 1, "token loader: batch ", options_.batch,
               " and seq_len ", options_.seq_len, " must be at least 1");
  TESSEL_CHECK(options_.world >= 1 && options_.rank >= 0 && options_.rank < options_.world,
               "token loader: rank ", options_.rank, " expected in [0, world ", options_.world,
               ")");
  const int64_t n = data_->size();
  TESSEL_CHECK(n >= options_.seq_len + 1, "token loader: the dataset (", data_->shards().size(),
               " shard(s), first '", data_->shards().empty() ? "" : data_->shards().front().path(),
               "') holds ", n, " tokens in total, fewer than seq_len + 1 = ", options_.seq_len + 1);
  windows_ = (n - 1) / options_.seq_len;
  row_.resize(size_t(options_.seq_len + 1));
}

const std::vector<int64_t>& TokenLoader::order(int64_t epoch) const {
  if (order_epoch_ == epoch) return order_;
  order_.resize(size_t(windows_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates; step i draws 64 bits from Philox at counter (i, epoch) under the seed and
    // maps them to [0, i] by a multiply-high (bias below n / 2^64).
    for (int64_t i = windows_ - 1; i > 0; --i) {
      const auto r = philox4x32(uint64_t(i), uint64_t(epoch), options_.seed);
      const uint64_t bits = uint64_t(r[0]) | uint64_t(r[1]) << 32;
      const auto j = int64_t((static_cast<unsigned __int128>(bits) * uint64_t(i + 1)) >> 64);
      std::swap(order_[size_t(i)], order_[size_t(j)]);
    }
  }
  order_epoch_ = epoch;
  return order_;
}

int64_t TokenLoader::window_start(int64_t epoch, int64_t index) const {
  TESSEL_CHECK(epoch >= 0 && index >= 0 && index < windows_, "token loader: window ", index,
               " of epoch ", epoch, " outside [0, ", windows_, ")");
  return order(epoch)[size_t(index)] * options_.seq_len;
}

void TokenLoader::next_into(int64_t* x, int64_t* y) {
  const int64_t t = options_.seq_len;
  const int64_t first_row = options_.batch * options_.rank;
  const int64_t rows = options_.batch * options_.world;
  for (int64_t r = 0; r < rows; ++r) {
    if (index_ == windows_) {
      ++epoch_;
      index_ = 0;
    }
    const int64_t i = index_++;
    if (r < first_row || r >= first_row + options_.batch) continue;
    data_->read(window_start(epoch_, i), t + 1, row_.data());
    const int64_t b = r - first_row;
    std::copy(row_.begin(), row_.end() - 1, x + b * t);
    std::copy(row_.begin() + 1, row_.end(), y + b * t);
  }
  if (index_ == windows_) {  // a finished epoch reads as the start of the next
    ++epoch_;
    index_ = 0;
  }
}

TokenBatch TokenLoader::next() {
  TokenBatch batch{empty({options_.batch, options_.seq_len}, DType::I64),
                   empty({options_.batch, options_.seq_len}, DType::I64)};
  next_into(batch.x.data<int64_t>(), batch.y.data<int64_t>());
  return batch;
}

LoaderPosition TokenLoader::position() const {
  return LoaderPosition{options_.seed, epoch_, index_, windows_};
}

void TokenLoader::set_position(const LoaderPosition& p) {
  TESSEL_CHECK(p.windows == windows_, "token loader: position was saved for ", p.windows,
               " windows per epoch, this dataset and seq_len give ", windows_,
               " (different data or seq_len)");
  TESSEL_CHECK(p.epoch >= 0 && p.index >= 0 && p.index <= windows_, "token loader: position epoch ",
               p.epoch, " index ", p.index, " outside [0, ", windows_, "]");
  if (p.seed != options_.seed) order_epoch_ = -1;
  options_.seed = p.seed;
  epoch_ = p.epoch + (p.index == windows_ ? 1 : 0);
  index_ = p.index == windows_ ? 0 : p.index;
}

}  // namespace tessel::io
