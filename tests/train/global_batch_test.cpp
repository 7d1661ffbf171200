// SPDX-License-Identifier: Apache-2.0
// The global batch: derived from micro_batch x grad_accum x dp when unset; when set, the
// accumulation follows from it and the layout (with a note when that changes grad_accum), and a
// global batch that no whole number of micro-steps makes is an Error naming the values.
#include "tessel/train/global_batch.h"

#include <gtest/gtest.h>

#include "tessel/core/error.h"

namespace tessel::train {
namespace {

TrainSection section(int64_t micro, int64_t accum, int64_t global) {
  TrainSection t;
  t.micro_batch = micro;
  t.grad_accum = accum;
  t.global_batch = global;
  return t;
}

std::string error_of(const TrainSection& t, int64_t dp) {
  try {
    resolve_global_batch(t, dp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GlobalBatch, UnsetIsMicroBatchTimesAccumulationTimesDp) {
  const GlobalBatch g = resolve_global_batch(section(7, 3, 0), 13);
  EXPECT_EQ(g.sequences, 7 * 3 * 13);
  EXPECT_EQ(g.grad_accum, 3);
  EXPECT_TRUE(g.note.empty());
}

TEST(GlobalBatch, SetDeterminesTheAccumulation) {
  // The (2,2,2) run of the issue: 144 tokens per step at T 18 is 8 sequences; at dp 3 with
  // micro_batch 1 that is not whole, with micro_batch 2 at dp 4 it is one micro-step.
  GlobalBatch g = resolve_global_batch(section(2, 3, 12), 2);
  EXPECT_EQ(g.grad_accum, 3);
  EXPECT_TRUE(g.note.empty()) << g.note;
  g = resolve_global_batch(section(2, 3, 12), 3);
  EXPECT_EQ(g.grad_accum, 2);
  EXPECT_EQ(g.sequences, 12);
  EXPECT_EQ(g.note,
            "train.grad_accum = 2 (configured 3): train.global_batch = 12 sequences over dp 3 x "
            "micro_batch 2");
  EXPECT_EQ(resolve_global_batch(section(1, 1, 33), 1).grad_accum, 33);
}

TEST(GlobalBatch, AGlobalBatchThatDoesNotSplitIsRefused) {
  const std::string e = error_of(section(2, 3, 12), 5);
  EXPECT_NE(e.find("train.global_batch = 12 sequences per step is not a whole number of "
                   "micro-steps of train.micro_batch = 2 x dp = 5 (10 sequences)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("no micro_batch divides it over this dp"), std::string::npos) << e;
  const std::string f = error_of(section(4, 1, 12), 2);
  EXPECT_NE(f.find("set train.micro_batch to one of 1, 2, 3, 6"), std::string::npos) << f;
  EXPECT_NE(error_of(section(2, 1, -1), 1).find("train.global_batch -1"), std::string::npos);
}

}  // namespace
}  // namespace tessel::train
