// SPDX-License-Identifier: Apache-2.0
// The `train.recompute` key (none | selective | full) and the recomputed FLOPs that HFU adds to
// MFU's count.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/models/gpt2/gpt2_config.h"
#include "tessel/train/config.h"
#include "tessel/train/metrics/metrics.h"

namespace tessel::train {
namespace {

using nn::Recompute;

std::string error_of(const std::string& text, const std::vector<std::string>& overrides) {
  try {
    TrainConfig::parse(text, overrides, "run.toml");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tessel::Error";
  return "";
}

TEST(RecomputeConfig, DefaultsToNoneAndParsesEveryMode) {
  EXPECT_EQ(TrainConfig::parse("", {}).train.recompute, "none");
  for (const char* mode : {"none", "selective", "full"}) {
    const TrainConfig from_toml =
        TrainConfig::parse(std::string("[train]\nrecompute = \"") + mode + "\"\n", {});
    EXPECT_EQ(from_toml.train.recompute, mode);
    const TrainConfig from_set = TrainConfig::parse("", {std::string("train.recompute=") + mode});
    EXPECT_EQ(from_set.train.recompute, mode);
    // The value the trainer hands to the model names an nn::Recompute.
    EXPECT_EQ(nn::recompute_name(nn::parse_recompute(from_set.train.recompute)), mode);
  }
  // The override wins over the file, and the resolved config prints it back.
  const TrainConfig both =
      TrainConfig::parse("[train]\nrecompute = \"full\"\n", {"train.recompute=selective"});
  EXPECT_EQ(both.train.recompute, "selective");
  EXPECT_EQ(TrainConfig::parse(both.to_toml(), {}).train.recompute, "selective");
}

TEST(RecomputeConfig, RejectsUnknownModesAndWrongTypes) {
  for (const std::string bad :
       {"partial", "Full", "none ", "selective,", ",full", "full,,none", "full;none"}) {
    for (const std::string& e : {error_of("", {"train.recompute=\"" + bad + "\""}),
                                 error_of("[train]\nrecompute = \"" + bad + "\"\n", {})}) {
      EXPECT_NE(e.find("train.recompute"), std::string::npos) << e;
      EXPECT_NE(e.find("none, selective, full"), std::string::npos) << e;
    }
  }
  EXPECT_NE(error_of("", {"train.recompute=\"\""}).find("train.recompute must not be empty"),
            std::string::npos);
  const std::string e = error_of("[train]\nrecompute = 1\n", {});
  EXPECT_NE(e.find("train.recompute"), std::string::npos) << e;
}

// A mode on a rank's first blocks only ("full:3"): the count parsed beside the mode, named back,
// handed to each rank; malformed counts named.
TEST(RecomputeConfig, ACountOfTheRanksFirstBlocks) {
  const TrainConfig c = TrainConfig::parse("", {"train.recompute=full:3,selective:1*2,none"});
  const std::vector<Recompute> modes = nn::parse_recompute_list(c.train.recompute);
  const std::vector<int64_t> blocks = nn::parse_recompute_blocks(c.train.recompute);
  EXPECT_EQ(modes, (std::vector<Recompute>{Recompute::Full, Recompute::Selective,
                                           Recompute::Selective, Recompute::None}));
  EXPECT_EQ(blocks, (std::vector<int64_t>{3, 1, 1, nn::kAllBlocks}));
  EXPECT_EQ(nn::recompute_list_name(modes, blocks), "full:3,selective:1*2,none");
  EXPECT_EQ(nn::recompute_list_name(modes), "full,selective*2,none");
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(nn::rank_recompute(c.train.recompute, r, 4).blocks, blocks[size_t(r)]);
  EXPECT_EQ(nn::parse_recompute_blocks("selective"), (std::vector<int64_t>{nn::kAllBlocks}));
  EXPECT_EQ(nn::rank_recompute("full:2", 3, 4).blocks, 2);
  EXPECT_EQ(nn::recompute_list_name({Recompute::Full, Recompute::Full}, {2, nn::kAllBlocks}),
            "full:2,full");
  for (const std::string bad :
       {"full:0", "full:", "full:x", "none:2", "full:2:3", "full:-1", "full:1234567"}) {
    const std::string e = error_of("", {"train.recompute=\"" + bad + "\""});
    EXPECT_NE(e.find("train.recompute"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("how many of the rank's blocks recompute"), std::string::npos)
        << bad << ": " << e;
  }
}

// A stronger mode on a rank's first blocks and another on the rest ("full:3+selective"): parsed
// beside the count, named back, handed to each rank; a rest without a count, or the entry's own
// mode, or an unknown one, named.
TEST(RecomputeConfig, AModeForTheRanksOtherBlocks) {
  const TrainConfig c =
      TrainConfig::parse("", {"train.recompute=full:3+selective,selective:1+full*2,full:2+none"});
  const std::string& spec = c.train.recompute;
  const std::vector<Recompute> modes = nn::parse_recompute_list(spec);
  const std::vector<int64_t> blocks = nn::parse_recompute_blocks(spec);
  std::vector<Recompute> rests;
  for (const nn::RankRecompute& e : nn::parse_recompute_entries(spec)) rests.push_back(e.rest);
  EXPECT_EQ(modes, (std::vector<Recompute>{Recompute::Full, Recompute::Selective,
                                           Recompute::Selective, Recompute::Full}));
  EXPECT_EQ(blocks, (std::vector<int64_t>{3, 1, 1, 2}));
  EXPECT_EQ(rests, (std::vector<Recompute>{Recompute::Selective, Recompute::Full, Recompute::Full,
                                           Recompute::None}));
  EXPECT_EQ(nn::recompute_list_name(modes, blocks, rests),
            "full:3+selective,selective:1+full*2,full:2");
  EXPECT_EQ(nn::recompute_list_name(modes, blocks), "full:3,selective:1*2,full:2");
  for (int r = 0; r < 4; ++r) {
    const nn::RankRecompute rc = nn::rank_recompute(spec, r, 4);
    EXPECT_EQ(rc.mode, modes[size_t(r)]) << r;
    EXPECT_EQ(rc.blocks, blocks[size_t(r)]) << r;
    EXPECT_EQ(rc.rest, rests[size_t(r)]) << r;
  }
  const nn::RankRecompute one = nn::rank_recompute("full:2+selective", 3, 4);
  EXPECT_EQ(one.mode, Recompute::Full);
  EXPECT_EQ(one.blocks, 2);
  EXPECT_EQ(one.rest, Recompute::Selective);
  ASSERT_EQ(nn::parse_recompute_entries("full").size(), 1u);
  EXPECT_EQ(nn::parse_recompute_entries("full")[0].rest, Recompute::None);
  EXPECT_THROW((void)nn::rank_recompute(spec, 0, 3), Error);
  for (const std::string bad :
       {"full+selective", "full:2+full", "full:2+", "full:2+partial", "selective:1+selective"}) {
    const std::string e = error_of("", {"train.recompute=\"" + bad + "\""});
    EXPECT_NE(e.find("train.recompute"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("after '+'"), std::string::npos) << bad << ": " << e;
  }
}

// One mode per pipeline rank: parsed, named back, and handed to each rank by its index.
TEST(RecomputeConfig, AModePerPipelineRank) {
  const TrainConfig c = TrainConfig::parse("", {"train.recompute=full,selective,none"});
  EXPECT_EQ(c.train.recompute, "full,selective,none");
  const std::vector<Recompute> modes = nn::parse_recompute_list(c.train.recompute);
  ASSERT_EQ(modes.size(), 3u);
  EXPECT_EQ(modes[0], Recompute::Full);
  EXPECT_EQ(modes[1], Recompute::Selective);
  EXPECT_EQ(modes[2], Recompute::None);
  EXPECT_EQ(nn::recompute_list_name(modes), "full,selective,none");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(nn::recompute_of_rank(modes, r, 3), modes[size_t(r)]);
  // One mode is every rank's.
  const std::vector<Recompute> one = nn::parse_recompute_list("selective");
  for (int r = 0; r < 5; ++r) EXPECT_EQ(nn::recompute_of_rank(one, r, 5), Recompute::Selective);
  // Neither one nor one per rank.
  try {
    (void)nn::recompute_of_rank(modes, 0, 2);
    ADD_FAILURE() << "three modes for two ranks were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gives 3 modes for --pp 2"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)nn::recompute_of_rank(one, 5, 5), Error);
}

// Runs of ranks as mode*N: parsed into one mode per rank, and named back that way.
TEST(RecomputeConfig, RunsOfRanksAsModeTimesN) {
  const TrainConfig c = TrainConfig::parse("", {"train.recompute=full,selective,none*2"});
  const std::vector<Recompute> modes = nn::parse_recompute_list(c.train.recompute);
  EXPECT_EQ(modes, (std::vector<Recompute>{Recompute::Full, Recompute::Selective, Recompute::None,
                                           Recompute::None}));
  EXPECT_EQ(nn::recompute_list_name(modes), "full,selective,none*2");
  EXPECT_EQ(nn::parse_recompute_list("full,selective,none,none"), modes);
  const std::vector<Recompute> sixteen = nn::parse_recompute_list("selective*8,none*7,full");
  ASSERT_EQ(sixteen.size(), 16u);
  for (int r = 0; r < 16; ++r)
    EXPECT_EQ(nn::recompute_of_rank(sixteen, r, 16), r < 8    ? Recompute::Selective
                                                     : r < 15 ? Recompute::None
                                                              : Recompute::Full);
  EXPECT_EQ(nn::recompute_list_name(sixteen), "selective*8,none*7,full");
  EXPECT_EQ(nn::parse_recompute_list("none*1,none*2"), std::vector<Recompute>(3, Recompute::None));
  EXPECT_EQ(nn::recompute_list_name(std::vector<Recompute>(3, Recompute::None)), "none*3");
  for (const std::string bad : {"full*0", "full*", "full*x", "full*-2", "full**2", "full*1000000",
                                "full*70000", "*3", "full*2*2"}) {
    const std::string e = error_of("", {"train.recompute=" + bad});
    EXPECT_NE(e.find("train.recompute"), std::string::npos) << bad << ": " << e;
    EXPECT_TRUE(e.find("whole number from 1 to 65536") != std::string::npos ||
                e.find("none, selective, full") != std::string::npos)
        << bad << ": " << e;
  }
  // The count is the ranks': eight modes for four ranks are refused by their number.
  try {
    (void)nn::recompute_of_rank(nn::parse_recompute_list("full*8"), 0, 4);
    ADD_FAILURE() << "eight modes for four ranks were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gives 8 modes for --pp 4"), std::string::npos)
        << e.what();
  }
}

TEST(RecomputeConfig, KeyTableRowListsTheModes) {
  int rows = 0;
  for (const auto& info : config_keys()) {
    if (info.key != "train.recompute") continue;
    ++rows;
    EXPECT_EQ(info.type, "string");
    EXPECT_EQ(info.default_value, "\"none\"");
    EXPECT_EQ(info.range, "non-empty");
    EXPECT_NE(info.doc.find("one per pipeline rank"), std::string::npos) << info.doc;
  }
  EXPECT_EQ(rows, 1);
}

models::GPT2Config odd_config() {
  models::GPT2Config c;
  c.vocab_size = 97;
  c.n_positions = 64;
  c.n_embd = 39;
  c.n_head = 3;
  c.n_layer = 3;
  c.n_inner = 77;
  return c;
}

// One block's parameters, from the model's own count: two models differing by one layer.
double block_params(models::GPT2Config c) {
  c.n_layer = 2;
  const double two = double(c.parameter_count());
  c.n_layer = 1;
  return two - double(c.parameter_count());
}

TEST(RecomputeFlops, FullRepeatsEveryBlockForwardAndNoneNothing) {
  const models::GPT2Config c = odd_config();
  const int64_t t = 13;
  EXPECT_EQ(c.recompute_flops_per_token(Recompute::None, t), 0.0);
  const double want = 3.0 * (2.0 * block_params(c) + 2.0 * 39.0 * 13.0);
  EXPECT_DOUBLE_EQ(c.recompute_flops_per_token(Recompute::Full, t), want);
}

TEST(RecomputeFlops, SelectiveRepeatsLn1TheQkvProjectionAndTheAttention) {
  const models::GPT2Config c = odd_config();
  const double c1 = 39.0, t = 13.0;
  const double ln_1 = 2.0 * c1, c_attn = c1 * 3.0 * c1 + 3.0 * c1;
  EXPECT_DOUBLE_EQ(c.recompute_flops_per_token(Recompute::Selective, 13),
                   3.0 * (2.0 * (ln_1 + c_attn) + 2.0 * c1 * t));
  // Between none and full, and the attention part grows with T as in flops_per_token.
  const double s13 = c.recompute_flops_per_token(Recompute::Selective, 13);
  EXPECT_GT(s13, 0.0);
  EXPECT_LT(s13, c.recompute_flops_per_token(Recompute::Full, 13));
  EXPECT_DOUBLE_EQ(c.recompute_flops_per_token(Recompute::Selective, 26) - s13,
                   3.0 * 2.0 * c1 * 13.0);
  // For GPT-2 124M at T = 1024, full recomputation adds about a third of the model's FLOPs.
  const models::GPT2Config g = models::GPT2Config::preset("124M");
  const double model =
      flops_per_token(g.parameter_count() - g.n_positions * g.n_embd, g.n_layer, g.n_embd, 1024);
  const double full = g.recompute_flops_per_token(Recompute::Full, 1024);
  EXPECT_GT(full / model, 0.2);
  EXPECT_LT(full / model, 1.0 / 3.0);
}

TEST(RecomputeFlops, RejectsANonPositiveSequenceLength) {
  EXPECT_THROW(odd_config().recompute_flops_per_token(Recompute::Full, 0), Error);
}

}  // namespace
}  // namespace tessel::train
