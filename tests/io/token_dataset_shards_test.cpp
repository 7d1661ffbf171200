// SPDX-License-Identifier: Apache-2.0
// Token shard format: uint16/uint32 selection, round trips, and every kind of bad file refused
// with an error naming the file and the field.
#include <cstring>

#include "common/token_dataset_test_util.h"
#include "tessel/io/token_shards.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> ramp(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t((i * 7919 + 13) % vocab);
  return t;
}

void put_u64(std::string& bytes, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes[at + size_t(i)] = char(uint8_t(v >> (8 * i)));
}

TEST(TokenShards, DTypeFollowsVocabularySize) {
  EXPECT_EQ(token_bytes_for_vocab(1), 2);
  EXPECT_EQ(token_bytes_for_vocab(50257), 2);
  EXPECT_EQ(token_bytes_for_vocab(65536), 2);
  EXPECT_EQ(token_bytes_for_vocab(65537), 4);
  EXPECT_EQ(token_bytes_for_vocab(128256), 4);
  expect_error([] { token_bytes_for_vocab(0); }, {"vocabulary size 0"});
}

TEST(TokenShards, RoundTripUint16AndUint32) {
  const auto dir = data_temp_dir("roundtrip");
  for (int64_t vocab : {int64_t(257), int64_t(65536), int64_t(65537), int64_t(70001)}) {
    const std::vector<int32_t> tokens = ramp(257, vocab);
    std::vector<int32_t> with_max = tokens;
    with_max.push_back(int32_t(vocab - 1));
    const std::string path = (dir / ("v" + std::to_string(vocab) + ".bin")).string();
    const TokenShardInfo info = write_token_shard(path, with_max, vocab);
    const int bytes = vocab <= 65536 ? 2 : 4;
    EXPECT_EQ(info.token_bytes, bytes);
    EXPECT_EQ(fs::file_size(path), kTokenShardHeaderBytes + with_max.size() * size_t(bytes));
    const TokenShard shard = TokenShard::open(path);
    EXPECT_EQ(shard.size(), int64_t(with_max.size()));
    EXPECT_EQ(shard.vocab_size(), vocab);
    EXPECT_EQ(shard.info().checksum, info.checksum);
    std::vector<int64_t> back(with_max.size());
    shard.read(0, shard.size(), back.data());
    for (size_t i = 0; i < with_max.size(); ++i) ASSERT_EQ(back[i], with_max[i]) << i;
    EXPECT_EQ(shard.at(shard.size() - 1), vocab - 1);
  }
  // Nothing but the shards is left behind (the temporary names are renamed away).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 4);
}

TEST(TokenShards, EmptyShardIsValid) {
  const auto dir = data_temp_dir("empty");
  write_token_shard((dir / "e.bin").string(), {}, 300);
  EXPECT_EQ(TokenShard::open((dir / "e.bin").string()).size(), 0);
}

TEST(TokenShards, WriterRefusesTokensOutsideTheVocabulary) {
  const auto dir = data_temp_dir("writer");
  const std::string path = (dir / "w.bin").string();
  expect_error(
      [&] {
        write_token_shard(path, std::vector<int32_t>{1, 2, 300}, 300);
      },
      {"w.bin", "token 2 is 300", "[0, 300)"});
  expect_error([&] { write_token_shard(path, std::vector<int32_t>{-1}, 300); }, {"token 0 is -1"});
  EXPECT_FALSE(fs::exists(path));
}

class BadShard : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = data_temp_dir("bad");
    path_ = (dir_ / "s.bin").string();
    write_token_shard(path_, ramp(33, 1000), 1000);
    good_ = read_bytes(path_);
  }
  void expect_refused(const std::string& bytes, const std::vector<std::string>& parts,
                      bool verify = true) {
    write_bytes(path_, bytes);
    std::vector<std::string> all = parts;
    all.push_back(path_);
    expect_error([&] { TokenShard::open(path_, verify); }, all);
  }
  fs::path dir_;
  std::string path_, good_;
};

TEST_F(BadShard, Truncated) {
  expect_refused(good_.substr(0, 13), {"truncated", "13 bytes"});
  expect_refused(good_.substr(0, good_.size() - 1), {"header says 33 tokens", "65 payload bytes"});
  expect_refused(good_ + "x", {"header says 33 tokens", "67 payload bytes"});
}

TEST_F(BadShard, BadMagicAndVersion) {
  std::string bytes = good_;
  bytes[0] = 'X';
  expect_refused(bytes, {"bad magic"});
  bytes = good_;
  bytes[8] = 7;
  expect_refused(bytes, {"version 7", "expected 1"});
}

TEST_F(BadShard, WrongDType) {
  std::string bytes = good_;
  bytes[12] = 4;  // uint32 tokens for a vocabulary of 1000
  expect_refused(bytes, {"wrong dtype", "4 bytes per token", "vocabulary of 1000", "uint16"});
  bytes = good_;
  put_u64(bytes, 24, 0);
  expect_refused(bytes, {"vocabulary size 0"});
  bytes = good_;
  bytes[50] = 1;
  expect_refused(bytes, {"reserved header byte 50"});
}

TEST_F(BadShard, ChecksumMismatch) {
  std::string bytes = good_;
  bytes[kTokenShardHeaderBytes + 5] ^= 1;
  expect_refused(bytes, {"checksum mismatch"});
  // Without verification only the header is checked, and it is consistent.
  write_bytes(path_, bytes);
  EXPECT_NO_THROW(TokenShard::open(path_, false));
  expect_error([&] { TokenShard::open(path_, false).verify(); }, {"checksum mismatch"});
}

TEST_F(BadShard, TokenNotBelowVocabulary) {
  // A payload with a token >= vocab and a checksum that matches it: only the range check fails.
  std::string bytes = good_;
  const size_t at = kTokenShardHeaderBytes + 2 * 7;
  bytes[at] = char(0xe8);  // 1000 = 0x03e8
  bytes[at + 1] = 0x03;
  put_u64(bytes, 32,
          fnv1a64(bytes.data() + kTokenShardHeaderBytes, bytes.size() - kTokenShardHeaderBytes));
  expect_refused(bytes, {"token 7 is 1000", "vocabulary size 1000"});
}

TEST_F(BadShard, ReadOutsideTheShard) {
  const TokenShard shard = TokenShard::open(path_);
  std::vector<int64_t> out(40);
  expect_error([&] { shard.read(30, 4, out.data()); }, {"[30, 34)", "[0, 33)"});
  expect_error([&] { shard.at(33); }, {"index 33"});
}

TEST(TokenShards, MissingFileNamesIt) {
  expect_error([] { TokenShard::open("/nonexistent/dir/x.bin"); }, {"/nonexistent/dir/x.bin"});
}

TEST(TokenShards, Fnv1a64KnownValues) {
  // Published FNV-1a 64 test vectors.
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ull);
}

}  // namespace
}  // namespace tessel::io
