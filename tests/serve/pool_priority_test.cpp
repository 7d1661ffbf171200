// SPDX-License-Identifier: Apache-2.0
// Groups of requests over one KV pool (serve/pool_priority.h): the engine's loop of
// serve/engine_groups.cpp (each round plans a step for every group without one in flight, then
// finishes the oldest step in flight) driven over the real schedulers and block manager, with a
// stand-in for the model that samples a fixed next token. Three long requests in three groups,
// each fitting the pool alone but no two together, chunked prefill: without the anchor they
// preempt each other forever; with it all finish, and every block is free at the end. Also odd
// shapes: 3 groups, 7 requests.
#include "tessel/serve/pool_priority.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "tessel/serve/block_manager.h"
#include "tessel/serve/scheduler.h"

namespace tessel::serve {
namespace {

struct Simulation {
  int64_t finished = 0, rounds = 0, preemptions = 0;
  bool stuck = false;  // the round limit was reached
};

// `prompts[i]` tokens then `max_tokens` sampled ones for request i, placed in group i % groups;
// every request queued before the first round. Runs until all finish or `round_limit` rounds.
Simulation simulate(const std::vector<int64_t>& prompts, int64_t max_tokens, int groups,
                    int64_t num_blocks, int64_t block_size, int64_t budget, bool priority,
                    int64_t round_limit) {
  BlockManager blocks(num_blocks, block_size, /*prefix_caching=*/true);
  std::vector<std::unique_ptr<Scheduler>> schedulers;
  std::vector<Scheduler*> raw;
  for (int g = 0; g < groups; ++g) {
    schedulers.push_back(std::make_unique<Scheduler>(blocks, budget, 8));
    raw.push_back(schedulers.back().get());
  }
  std::optional<PoolPriority> anchor;
  if (priority) anchor.emplace(raw);
  std::vector<std::shared_ptr<Sequence>> all;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto seq = std::make_shared<Sequence>();
    seq->id = int64_t(i);
    seq->request = std::make_shared<RequestState>();
    seq->request->arrival = i;
    for (int64_t t = 0; t < prompts[i]; ++t) seq->tokens.push_back(int64_t(i) * 1000 + t);
    seq->prompt_length = prompts[i];
    seq->group = int(i) % groups;
    schedulers[size_t(seq->group)]->add_waiting(seq);
    all.push_back(seq);
  }
  struct InFlight {
    int group;
    StepPlan plan;
  };
  std::deque<InFlight> in_flight;
  std::vector<bool> busy(size_t(groups), false);
  Simulation out;
  while (out.finished < int64_t(prompts.size())) {
    if (++out.rounds > round_limit) {
      out.stuck = true;
      break;
    }
    for (int g = 0; g < groups; ++g) {
      if (busy[size_t(g)]) continue;
      StepPlan plan = schedulers[size_t(g)]->schedule();
      if (anchor) anchor->after_plan(plan);
      if (plan.empty()) continue;
      busy[size_t(g)] = true;
      in_flight.push_back({g, std::move(plan)});
    }
    if (in_flight.empty()) continue;
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    busy[size_t(f.group)] = false;
    Scheduler& s = *schedulers[size_t(f.group)];
    s.complete(f.plan);
    for (const ScheduledChunk& c : f.plan.chunks) {
      if (!c.sample || c.seq->state != SeqState::kRunning) continue;
      c.seq->tokens.push_back(7);  // the stand-in model's sample
      if (c.seq->generated() == max_tokens) {
        s.remove(*c.seq);
        ++out.finished;
      }
    }
  }
  for (const auto& s : schedulers) out.preemptions += s->preemptions();
  if (!out.stuck) {
    blocks.check_invariants();
    EXPECT_EQ(blocks.num_sequences(), 0);
  }
  return out;
}

// Three requests of 31 + 8 tokens (10 blocks of 4 each) in three groups, a pool of 11 blocks,
// prompts in chunks of 8: each fits alone, no two together. Without the anchor no request ever
// finishes (each round preempts some sequence, none gets to its end); with it all do.
TEST(PoolPriority, ThreeGroupsLivelockWithoutTheAnchor) {
  const Simulation without = simulate({31, 31, 31}, 8, 3, 11, 4, 8, false, 20000);
  EXPECT_TRUE(without.stuck) << "finished " << without.finished << " in " << without.rounds
                             << " rounds";
  EXPECT_EQ(without.finished, 0);
  EXPECT_GT(without.preemptions, 1000);
  const Simulation with = simulate({31, 31, 31}, 8, 3, 11, 4, 8, true, 20000);
  EXPECT_FALSE(with.stuck) << "finished " << with.finished << ", " << with.preemptions
                           << " preemptions";
  EXPECT_EQ(with.finished, 3);
  EXPECT_GT(with.preemptions, 0);
}

TEST(PoolPriority, EveryRequestFinishesUnderPressure) {
  // 3 groups, 7 requests of odd lengths (each fits the 13-block pool alone), budgets 3 and 33.
  for (int64_t budget : {3, 33}) {
    const Simulation s = simulate({7, 13, 33, 21, 5, 29, 17}, 13, 3, 13, 4, budget, true, 100000);
    EXPECT_FALSE(s.stuck) << "budget " << budget << ": finished " << s.finished;
    EXPECT_EQ(s.finished, 7);
    EXPECT_GT(s.preemptions, 0) << "budget " << budget << ": no pressure";
  }
}

TEST(PoolPriority, AnchorIsTheOldestUnfinished) {
  BlockManager blocks(4, 4, false);
  Scheduler a(blocks, 8, 4), b(blocks, 8, 4);
  PoolPriority priority({&a, &b});
  EXPECT_EQ(priority.anchor(), nullptr);
  std::vector<std::shared_ptr<Sequence>> seqs;
  for (int i = 0; i < 3; ++i) {
    auto s = std::make_shared<Sequence>();
    s->id = i;
    s->request = std::make_shared<RequestState>();
    s->request->arrival = uint64_t(10 - i);  // the last is the oldest
    s->tokens = {1, 2, 3};
    s->prompt_length = 3;
    seqs.push_back(s);
  }
  a.add_waiting(seqs[0]);
  b.add_waiting(seqs[1]);
  b.add_waiting(seqs[2]);
  StepPlan none;
  priority.after_plan(none);  // no preemption: no anchor
  EXPECT_EQ(priority.anchor(), nullptr);
  StepPlan preempted;
  preempted.preempted = 1;
  priority.after_plan(preempted);
  EXPECT_EQ(priority.anchor(), seqs[2].get());
  // Only the anchor is admitted while it lives: group a admits nothing.
  EXPECT_TRUE(a.schedule().empty());
  EXPECT_EQ(b.schedule().chunks.size(), 1u);
  EXPECT_EQ(b.running().front().get(), seqs[2].get());
  b.remove(*seqs[2]);
  EXPECT_EQ(priority.anchor(), nullptr);
  EXPECT_FALSE(a.schedule().empty());
}

}  // namespace
}  // namespace tessel::serve
