// SPDX-License-Identifier: Apache-2.0
// Token datasets for training: the shards of one split read as one concatenated stream, and a
// loader that draws (B, T+1) windows in a seeded order (a Philox-driven Fisher-Yates shuffle per
// epoch, without replacement) with an exact position that can be saved and restored.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/io/token_shards.h"
#include "tessel/tensor/tensor.h"

namespace tessel::io {

// The shards of one split, concatenated in order.
class TokenDataset {
 public:
  explicit TokenDataset(const std::vector<std::string>& shard_paths, bool verify = true);
  // The shards that `dir`/manifest.json (written by prepare_token_dataset) lists for `split`
  // ("train" or "val"); their headers must agree with the manifest.
  static TokenDataset open(const std::string& dir, const std::string& split, bool verify = true);
  // Whether `dir`/manifest.json lists at least one shard for `split` (false when the manifest is
  // missing or unreadable: open() says why). A split the manifest declares must open; one it does
  // not declare (--val-fraction 0) is simply absent.
  static bool declares_split(const std::string& dir, const std::string& split);

  int64_t size() const { return total_; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<TokenShard>& shards() const { return shards_; }
  // Tokens [start, start + count) of the stream, across shard boundaries.
  void read(int64_t start, int64_t count, int64_t* out) const;

 private:
  std::vector<TokenShard> shards_;
  std::vector<int64_t> starts_;  // stream offset of each shard
  int64_t total_ = 0;
  int64_t vocab_size_ = 0;
};

struct LoaderOptions {
  int64_t batch = 1;    // B: rows per rank and step
  int64_t seq_len = 1;  // T: each row reads T + 1 tokens
  uint64_t seed = 0;
  bool shuffle = true;  // false: windows in stream order (evaluation)
  // Data parallelism: each step consumes batch * world windows; rank r takes rows
  // [r * batch, (r + 1) * batch) of them.
  int rank = 0;
  int world = 1;
};

// Where a loader stands: the next window is number `index` of epoch `epoch`'s order. `windows`
// (windows per epoch) fingerprints the dataset and T so a position is not applied to another.
struct LoaderPosition {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;
  int64_t windows = 0;

  std::string to_json() const;  // {"seed":..,"epoch":..,"index":..,"windows":..}
  static LoaderPosition from_json(std::string_view text);
  bool operator==(const LoaderPosition&) const = default;
};

struct TokenBatch {
  Tensor x;  // i64 [B, T]
  Tensor y;  // i64 [B, T], x shifted by one token
};

class TokenLoader {
 public:
  TokenLoader(std::shared_ptr<const TokenDataset> data, const LoaderOptions& options);

  TokenBatch next();
  // The same into caller buffers of B * T elements each.
  void next_into(int64_t* x, int64_t* y);

  LoaderPosition position() const;
  // Continues from a saved position; the seed it holds replaces the loader's.
  void set_position(const LoaderPosition& position);

  // Non-overlapping windows of T + 1 tokens start every T tokens: (N - 1) / T of them.
  int64_t windows_per_epoch() const { return windows_; }
  // Stream offset of the window at `index` in `epoch`'s order.
  int64_t window_start(int64_t epoch, int64_t index) const;
  const LoaderOptions& options() const { return options_; }

 private:
  const std::vector<int64_t>& order(int64_t epoch) const;

  std::shared_ptr<const TokenDataset> data_;
  LoaderOptions options_;
  int64_t windows_ = 0;
  int64_t epoch_ = 0;
  int64_t index_ = 0;
  mutable int64_t order_epoch_ = -1;
  mutable std::vector<int64_t> order_;
  std::vector<int64_t> row_;
};

}  // namespace tessel::io
