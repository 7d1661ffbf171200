// SPDX-License-Identifier: Apache-2.0
// Shared state of the in-process backend: a world of thread-ranks, the rendezvous of one group
// (every rank stages its contribution, meets the others, computes its own output from all
// contributions, meets them again), and the mailboxes of send/recv. Waits have deadlines; a rank
// that times out diagnoses the hang from the other ranks' recorders directly.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tessel/dist/record.h"

namespace tessel::dist::threads {

// One in-process world: the first failure ends every rank's waits.
class WorldState {
 public:
  explicit WorldState(int size);
  explicit WorldState(std::vector<std::shared_ptr<RankContext>> contexts)
      : contexts_(std::move(contexts)) {}
  int size() const { return int(contexts_.size()); }
  RankContext& context(int world_rank) { return *contexts_[size_t(world_rank)]; }
  std::shared_ptr<RankContext> context_ptr(int world_rank) { return contexts_[size_t(world_rank)]; }

  void fail(const std::string& message);  // the first message wins
  std::optional<std::string> failure() const;
  [[noreturn]] void throw_failure(const CommInfo& comm) const;

 private:
  std::vector<std::shared_ptr<RankContext>> contexts_;
  mutable std::mutex mutex_;
  std::optional<std::string> failure_;
};

struct Message {
  DType dtype;
  int64_t numel;
  std::vector<std::byte> bytes;
};

class Mailbox {
 public:
  void put(int src, int dst, int tag, Message m);
  std::optional<Message> try_take(int src, int dst, int tag);
  // Blocks until a message arrives; polls the world's failure flag; nullopt at the deadline.
  std::optional<Message> take(int src, int dst, int tag, double deadline_s,
                              const WorldState& world);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, int>, std::deque<Message>> queues_;
};

// What one rank brings to a collective.
struct Contribution {
  const OpCall* call = nullptr;
  Record record;
  std::vector<std::byte> staged;  // a copy of its input, read by the others
};

class Group {
 public:
  Group(std::shared_ptr<WorldState> world, std::vector<int> world_ranks,
        std::shared_ptr<Mailbox> mailbox);
  int size() const { return int(world_ranks_.size()); }
  WorldState& world() const { return *world_; }
  const std::shared_ptr<WorldState>& world_ptr() const { return world_; }
  Mailbox& mailbox() const { return *mailbox_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // Stages rank's contribution and waits for every rank's (phase 1), checks that they issued the
  // same call, or fails the world naming who did what.
  const std::vector<Contribution>& arrive(int rank, const CommInfo& comm, const OpCall& call,
                                          const Record& record, double deadline_s);
  // Phase 2: every rank has read the contributions; they may be overwritten.
  void depart(int rank, const CommInfo& comm, const Record& record, double deadline_s);

  // The twin group of asynchronous calls (same members, same mailbox), created once.
  std::shared_ptr<Group> lane();
  // The child group for `color` of the split numbered `split_index`, created by the first member
  // that asks.
  std::shared_ptr<Group> child(uint64_t split_index, int color,
                               const std::vector<int>& world_ranks);

 private:
  void meet(int rank, const CommInfo& comm, const Record& record, double deadline_s);

  std::shared_ptr<WorldState> world_;
  std::vector<int> world_ranks_;
  std::shared_ptr<Mailbox> mailbox_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<Contribution> slots_;
  std::shared_ptr<Group> lane_;
  struct Pending {
    std::shared_ptr<Group> group;
    size_t fetches_left = 0;
  };
  std::map<std::pair<uint64_t, int>, Pending> children_;  // until every member has fetched it
};

// The diagnosis of a wait that passed its deadline, from every member's recorder.
std::string diagnose_in_process(const Record& stuck, const CommInfo& comm, WorldState& world,
                                double waited_s, double deadline_s);

}  // namespace tessel::dist::threads
