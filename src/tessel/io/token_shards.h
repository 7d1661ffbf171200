// SPDX-License-Identifier: Apache-2.0
// Token shards: a flat file of token ids behind a validated 64-byte little-endian header (magic,
// version, bytes per token, token count, vocabulary size, FNV-1a 64 checksum of the payload).
// Tokens are uint16 when the vocabulary has at most 65536 entries, else uint32.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tessel/io/mapped_file.h"

namespace tessel::io {

inline constexpr char kTokenShardMagic[8] = {'T', 'E', 'S', 'S', 'E', 'L', 'T', 'K'};
inline constexpr uint32_t kTokenShardVersion = 1;
inline constexpr size_t kTokenShardHeaderBytes = 64;

// 2 when every id of the vocabulary fits in uint16, else 4.
int token_bytes_for_vocab(int64_t vocab_size);

// FNV-1a 64 over bytes, continuing from `hash` (start with kFnv1a64Offset).
inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;
uint64_t fnv1a64(const void* bytes, size_t size, uint64_t hash = kFnv1a64Offset);

struct TokenShardInfo {
  int64_t tokens = 0;
  int64_t vocab_size = 0;
  int token_bytes = 0;
  uint64_t checksum = 0;
};

// Writes tokens (each in [0, vocab_size)) as a shard, atomically: a reader sees the old file or
// the complete new one.
TokenShardInfo write_token_shard(const std::string& path, std::span<const int32_t> tokens,
                                 int64_t vocab_size);

// A shard mapped read-only. open() always checks the header against the file length; with
// `verify` it also checks the checksum and that every token is below the vocabulary size.
class TokenShard {
 public:
  static TokenShard open(const std::string& path, bool verify = true);

  const std::string& path() const { return file_->path(); }
  const TokenShardInfo& info() const { return info_; }
  int64_t size() const { return info_.tokens; }
  int64_t vocab_size() const { return info_.vocab_size; }

  int64_t at(int64_t i) const;
  // Tokens [start, start + count) widened to int64.
  void read(int64_t start, int64_t count, int64_t* out) const;
  // Checksum and token range over the whole payload (what open(path, true) runs).
  void verify() const;

 private:
  TokenShard() = default;
  std::shared_ptr<MappedFile> file_;
  const uint8_t* payload_ = nullptr;
  TokenShardInfo info_;
};

}  // namespace tessel::io
