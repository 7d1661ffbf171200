// SPDX-License-Identifier: Apache-2.0
// Token shard writer and validating reader. Every field is read byte by byte as little-endian, so
// the files are portable; a bad file is refused with an Error that names it and the field.
#include "tessel/io/token_shards.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::io {

namespace {

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// Payload token i, little-endian.
inline uint32_t load_token(const uint8_t* payload, int bytes, int64_t i) {
  const uint8_t* p = payload + i * bytes;
  return bytes == 2 ? uint32_t(p[0]) | uint32_t(p[1]) << 8 : get_u32(p);
}

}  // namespace

int token_bytes_for_vocab(int64_t vocab_size) {
  TESSEL_CHECK(vocab_size >= 1 && vocab_size <= (int64_t(1) << 32), "token shard: vocabulary size ",
               vocab_size, " expected in [1, 2^32]");
  return vocab_size <= 65536 ? 2 : 4;
}

uint64_t fnv1a64(const void* bytes, size_t size, uint64_t hash) {
  const uint8_t* p = static_cast<const uint8_t*>(bytes);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

TokenShardInfo write_token_shard(const std::string& path, std::span<const int32_t> tokens,
                                 int64_t vocab_size) {
  TokenShardInfo info;
  info.token_bytes = token_bytes_for_vocab(vocab_size);
  info.vocab_size = vocab_size;
  info.tokens = int64_t(tokens.size());
  std::vector<uint8_t> buf(kTokenShardHeaderBytes + tokens.size() * size_t(info.token_bytes), 0);
  uint8_t* payload = buf.data() + kTokenShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = tokens[i];
    TESSEL_CHECK(t >= 0 && t < vocab_size, "token shard '", path, "': token ", i, " is ", t,
                 ", expected in [0, ", vocab_size, ")");
    uint8_t* p = payload + i * size_t(info.token_bytes);
    if (info.token_bytes == 2) {
      p[0] = uint8_t(t);
      p[1] = uint8_t(t >> 8);
    } else {
      put_u32(p, uint32_t(t));
    }
  }
  info.checksum = fnv1a64(payload, buf.size() - kTokenShardHeaderBytes);
  std::memcpy(buf.data(), kTokenShardMagic, 8);
  put_u32(buf.data() + 8, kTokenShardVersion);
  put_u32(buf.data() + 12, uint32_t(info.token_bytes));
  put_u64(buf.data() + 16, uint64_t(info.tokens));
  put_u64(buf.data() + 24, uint64_t(vocab_size));
  put_u64(buf.data() + 32, info.checksum);
  write_file_atomic(path, buf.data(), buf.size());
  return info;
}

TokenShard TokenShard::open(const std::string& path, bool verify) {
  TokenShard shard;
  shard.file_ = MappedFile::open(path);
  const size_t size = shard.file_->size();
  const uint8_t* h = shard.file_->data();
  TESSEL_CHECK(size >= kTokenShardHeaderBytes, "token shard '", path, "' is truncated: ", size,
               " bytes, the header alone needs ", kTokenShardHeaderBytes);
  TESSEL_CHECK(std::memcmp(h, kTokenShardMagic, 8) == 0, "token shard '", path,
               "': bad magic (not a tessel token shard)");
  const uint32_t version = get_u32(h + 8);
  TESSEL_CHECK(version == kTokenShardVersion, "token shard '", path, "': version ", version,
               ", expected ", kTokenShardVersion);
  TokenShardInfo& info = shard.info_;
  info.token_bytes = int(get_u32(h + 12));
  const uint64_t tokens = get_u64(h + 16);
  const uint64_t vocab = get_u64(h + 24);
  info.checksum = get_u64(h + 32);
  TESSEL_CHECK(vocab >= 1 && vocab <= (uint64_t(1) << 32), "token shard '", path,
               "': vocabulary size ", vocab, " expected in [1, 2^32]");
  info.vocab_size = int64_t(vocab);
  const int expected_bytes = token_bytes_for_vocab(info.vocab_size);
  TESSEL_CHECK(info.token_bytes == expected_bytes, "token shard '", path,
               "': wrong dtype: ", info.token_bytes, " bytes per token for a vocabulary of ", vocab,
               ", expected ", expected_bytes, expected_bytes == 2 ? " (uint16)" : " (uint32)");
  for (size_t i = 40; i < kTokenShardHeaderBytes; ++i) {
    TESSEL_CHECK(h[i] == 0, "token shard '", path, "': reserved header byte ", i, " is ", int(h[i]),
                 ", expected 0");
  }
  const uint64_t payload = size - kTokenShardHeaderBytes;
  TESSEL_CHECK(
      tokens <= payload / uint64_t(expected_bytes) && tokens * uint64_t(expected_bytes) == payload,
      "token shard '", path, "': header says ", tokens, " tokens of ", expected_bytes,
      " bytes, but the file holds ", payload, " payload bytes (truncated or padded)");
  info.tokens = int64_t(tokens);
  shard.payload_ = h + kTokenShardHeaderBytes;
  if (verify) shard.verify();
  return shard;
}

void TokenShard::verify() const {
  const size_t bytes = size_t(info_.tokens) * size_t(info_.token_bytes);
  const uint64_t sum = fnv1a64(payload_, bytes);
  TESSEL_CHECK(sum == info_.checksum, "token shard '", path(), "': checksum mismatch: payload has ",
               sum, ", header says ", info_.checksum, " (corrupted file)");
  uint32_t max_token = 0;
  if (info_.token_bytes == 2) {
    for (int64_t i = 0; i < info_.tokens; ++i) {
      max_token = std::max(max_token, load_token(payload_, 2, i));
    }
  } else {
    for (int64_t i = 0; i < info_.tokens; ++i) {
      max_token = std::max(max_token, load_token(payload_, 4, i));
    }
  }
  if (info_.tokens > 0 && int64_t(max_token) >= info_.vocab_size) {
    int64_t first = 0;
    while (int64_t(load_token(payload_, info_.token_bytes, first)) < info_.vocab_size) ++first;
    TESSEL_FAIL("token shard '", path(), "': token ", first, " is ",
                load_token(payload_, info_.token_bytes, first), ", not below the vocabulary size ",
                info_.vocab_size);
  }
}

int64_t TokenShard::at(int64_t i) const {
  TESSEL_CHECK(i >= 0 && i < info_.tokens, "token shard '", path(), "': index ", i,
               " out of range [0, ", info_.tokens, ")");
  return load_token(payload_, info_.token_bytes, i);
}

void TokenShard::read(int64_t start, int64_t count, int64_t* out) const {
  TESSEL_CHECK(start >= 0 && count >= 0 && start + count <= info_.tokens, "token shard '", path(),
               "': read of [", start, ", ", start + count, ") outside [0, ", info_.tokens, ")");
  if (info_.token_bytes == 2) {
    for (int64_t i = 0; i < count; ++i) out[i] = load_token(payload_, 2, start + i);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = load_token(payload_, 4, start + i);
  }
}

}  // namespace tessel::io
