// SPDX-License-Identifier: Apache-2.0
// TokenDataset and TokenLoader: reads across shards, x/y shift, seeded determinism, every window
// once per epoch, exact resume from a saved position, data-parallel rows, and bad setups.
#include <algorithm>
#include <set>

#include "common/token_dataset_test_util.h"
#include "tessel/io/token_dataset.h"

namespace tessel::io {
namespace {

// Three shards of odd sizes holding the stream 0, 1, 2, ... (mod vocab), so a token's value names
// its position.
std::shared_ptr<const TokenDataset> counting_dataset(const std::string& name,
                                                     std::vector<int64_t> sizes = {13, 1, 257},
                                                     int64_t vocab = 4096) {
  const auto dir = data_temp_dir(name);
  std::vector<std::string> paths;
  int64_t next = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < sizes[s]; ++i) tokens.push_back(int32_t(next++ % vocab));
    paths.push_back((dir / ("train_" + std::to_string(s) + ".bin")).string());
    write_token_shard(paths.back(), tokens, vocab);
  }
  return std::make_shared<TokenDataset>(paths);
}

std::vector<int64_t> values(const Tensor& t) {
  return t.to_vector<int64_t>();
}

std::vector<std::vector<int64_t>> draw(TokenLoader& loader, int steps) {
  std::vector<std::vector<int64_t>> out;
  for (int i = 0; i < steps; ++i) out.push_back(values(loader.next().x));
  return out;
}

TEST(TokenDataset, ReadsAcrossShards) {
  const auto data = counting_dataset("read");
  EXPECT_EQ(data->size(), 271);
  EXPECT_EQ(data->shards().size(), 3u);
  std::vector<int64_t> out(20);
  data->read(7, 20, out.data());  // spans all three shards
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(out[size_t(i)], 7 + i);
  expect_error([&] { data->read(260, 12, out.data()); }, {"[260, 272)", "[0, 271)"});
}

TEST(TokenDataset, ShardsMustShareTheVocabulary) {
  const auto dir = data_temp_dir("vocab_mix");
  write_token_shard((dir / "a.bin").string(), std::vector<int32_t>{1, 2}, 300);
  write_token_shard((dir / "b.bin").string(), std::vector<int32_t>{1, 2}, 400);
  expect_error(
      [&] {
        TokenDataset({(dir / "a.bin").string(), (dir / "b.bin").string()});
      },
      {"b.bin", "vocabulary of 400", "300"});
}

TEST(TokenLoader, TargetsAreInputsShiftedByOne) {
  const auto data = counting_dataset("shift");
  TokenLoader loader(data, {.batch = 3, .seq_len = 7, .seed = 5});
  EXPECT_EQ(loader.windows_per_epoch(), (271 - 1) / 7);
  for (int step = 0; step < 20; ++step) {
    const TokenBatch b = loader.next();
    ASSERT_EQ(b.x.shape(), Shape({3, 7}));
    ASSERT_EQ(b.x.dtype(), DType::I64);
    const auto x = values(b.x), y = values(b.y);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(x[size_t(r * 7)] % 7, 0) << "windows start on multiples of T";
      for (int t = 0; t < 7; ++t) {
        EXPECT_EQ(x[size_t(r * 7 + t)], x[size_t(r * 7)] + t);
        EXPECT_EQ(y[size_t(r * 7 + t)], x[size_t(r * 7 + t)] + 1);
      }
    }
  }
}

TEST(TokenLoader, SameSeedSameBatchesOtherSeedOthers) {
  const auto data = counting_dataset("seed");
  TokenLoader a(data, {.batch = 2, .seq_len = 13, .seed = 42});
  TokenLoader b(data, {.batch = 2, .seq_len = 13, .seed = 42});
  TokenLoader c(data, {.batch = 2, .seq_len = 13, .seed = 43});
  const auto da = draw(a, 33), db = draw(b, 33), dc = draw(c, 33);
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

TEST(TokenLoader, EachEpochVisitsEveryWindowOnceInANewOrder) {
  const auto data = counting_dataset("epoch");
  TokenLoader loader(data, {.batch = 1, .seq_len = 7, .seed = 1});
  const int64_t w = loader.windows_per_epoch();
  std::vector<int64_t> first, second;
  for (int64_t i = 0; i < 2 * w; ++i) {
    (i < w ? first : second).push_back(values(loader.next().x)[0]);
  }
  EXPECT_EQ(loader.position().epoch, 2);
  for (auto* order : {&first, &second}) {
    std::vector<int64_t> sorted = *order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < w; ++i) ASSERT_EQ(sorted[size_t(i)], i * 7);
  }
  EXPECT_NE(first, second);
}

TEST(TokenLoader, UnshuffledReadsInStreamOrder) {
  const auto data = counting_dataset("ordered");
  TokenLoader loader(data, {.batch = 2, .seq_len = 33, .shuffle = false});
  const auto x = values(loader.next().x);
  EXPECT_EQ(x[0], 0);
  EXPECT_EQ(x[33], 33);
}

TEST(TokenLoader, ResumeFromSavedPositionContinuesExactly) {
  const auto data = counting_dataset("resume");
  const LoaderOptions opt{.batch = 3, .seq_len = 7, .seed = 99};
  TokenLoader straight(data, opt);
  // 38 windows per epoch; 17 steps of 3 cross the epoch boundary.
  draw(straight, 11);
  const std::string saved = straight.position().to_json();
  const auto after = draw(straight, 17);

  TokenLoader resumed(data, {.batch = 3, .seq_len = 7, .seed = 0});  // the seed comes with it
  resumed.set_position(LoaderPosition::from_json(saved));
  EXPECT_EQ(resumed.position(), LoaderPosition::from_json(saved));
  EXPECT_EQ(draw(resumed, 17), after);
  EXPECT_EQ(resumed.position(), straight.position());
  EXPECT_EQ(straight.position().epoch, 2);
}

TEST(TokenLoader, PositionFromAnotherDatasetIsRefused) {
  const auto data = counting_dataset("mismatch");
  TokenLoader loader(data, {.batch = 1, .seq_len = 7});
  LoaderPosition p = loader.position();
  p.windows += 1;
  expect_error([&] { loader.set_position(p); }, {"39 windows", "38", "seq_len"});
  expect_error([] { LoaderPosition::from_json("{\"seed\": 1}"); }, {"loader position"});
}

TEST(TokenLoader, RanksSplitTheGlobalBatch) {
  const auto data = counting_dataset("ranks");
  TokenLoader whole(data, {.batch = 6, .seq_len = 7, .seed = 3});
  TokenLoader r0(data, {.batch = 3, .seq_len = 7, .seed = 3, .rank = 0, .world = 2});
  TokenLoader r1(data, {.batch = 3, .seq_len = 7, .seed = 3, .rank = 1, .world = 2});
  for (int step = 0; step < 9; ++step) {
    const auto w = values(whole.next().x), a = values(r0.next().x), b = values(r1.next().x);
    EXPECT_EQ(std::vector<int64_t>(w.begin(), w.begin() + 21), a);
    EXPECT_EQ(std::vector<int64_t>(w.begin() + 21, w.end()), b);
  }
  EXPECT_EQ(r0.position(), whole.position());
}

TEST(TokenLoader, TooFewTokensForOneWindow) {
  const auto data = counting_dataset("short", {5, 1, 1});
  expect_error([&] { TokenLoader(data, {.batch = 1, .seq_len = 7}); },
               {"holds 7 tokens in total", "seq_len + 1 = 8", "train_0.bin"});
  EXPECT_EQ(TokenLoader(data, {.batch = 4, .seq_len = 6}).windows_per_epoch(), 1);
  expect_error([&] { TokenLoader(data, {.batch = 0, .seq_len = 2}); }, {"batch 0"});
  expect_error([&] { TokenLoader(data, {.batch = 1, .seq_len = 2, .rank = 2, .world = 2}); },
               {"rank 2"});
}

}  // namespace
}  // namespace tessel::io
