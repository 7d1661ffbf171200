// SPDX-License-Identifier: Apache-2.0
// The in-process rendezvous, mailboxes and world failure. Waits wake every few milliseconds to
// notice a failure elsewhere in the world, so one failed rank ends all of them promptly.
#include "tessel/dist/threads/thread_group.h"

#include <chrono>
#include <cstring>
#include <sstream>

#include "tessel/dist/diagnosis.h"

namespace tessel::dist::threads {

namespace {
constexpr auto kPoll = std::chrono::milliseconds(20);
}

WorldState::WorldState(int size) {
  for (int r = 0; r < size; ++r) contexts_.push_back(std::make_shared<RankContext>(r));
}

void WorldState::fail(const std::string& message) {
  std::lock_guard lock(mutex_);
  if (!failure_) failure_ = message;
}

std::optional<std::string> WorldState::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void WorldState::throw_failure(const CommInfo& comm) const {
  std::optional<std::string> f = failure();
  throw Error(f ? *f : "in-process world on '" + comm.label + "' failed");
}

void Mailbox::put(int src, int dst, int tag, Message m) {
  {
    std::lock_guard lock(mutex_);
    queues_[{src, dst, tag}].push_back(std::move(m));
  }
  cv_.notify_all();
}

std::optional<Message> Mailbox::try_take(int src, int dst, int tag) {
  std::lock_guard lock(mutex_);
  auto it = queues_.find({src, dst, tag});
  if (it == queues_.end() || it->second.empty()) return std::nullopt;
  Message m = std::move(it->second.front());
  it->second.pop_front();
  return m;
}

std::optional<Message> Mailbox::take(int src, int dst, int tag, double deadline_s,
                                     const WorldState& world) {
  const double start = RankContext::now_s();
  std::unique_lock lock(mutex_);
  for (;;) {
    auto it = queues_.find({src, dst, tag});
    if (it != queues_.end() && !it->second.empty()) {
      Message m = std::move(it->second.front());
      it->second.pop_front();
      return m;
    }
    if (world.failure() || RankContext::now_s() - start > deadline_s) return std::nullopt;
    cv_.wait_for(lock, kPoll);
  }
}

Group::Group(std::shared_ptr<WorldState> world, std::vector<int> world_ranks,
             std::shared_ptr<Mailbox> mailbox)
    : world_(std::move(world)),
      world_ranks_(std::move(world_ranks)),
      mailbox_(std::move(mailbox)),
      slots_(world_ranks_.size()) {}

void Group::meet(int rank, const CommInfo& comm, const Record& record, double deadline_s) {
  const double start = RankContext::now_s();
  std::unique_lock lock(mutex_);
  const uint64_t generation = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  while (generation_ == generation) {
    if (world_->failure()) {
      lock.unlock();
      world_->throw_failure(comm);
    }
    const double waited = RankContext::now_s() - start;
    if (waited > deadline_s) {
      lock.unlock();
      world_->fail(diagnose_in_process(record, comm, *world_, waited, deadline_s));
      world_->throw_failure(comm);
    }
    cv_.wait_for(lock, kPoll);
  }
}

const std::vector<Contribution>& Group::arrive(int rank, const CommInfo& comm, const OpCall& call,
                                               const Record& record, double deadline_s) {
  if (world_->failure()) world_->throw_failure(comm);
  // Only this rank writes its slot, and nobody reads it until everyone has met: no lock needed.
  Contribution& mine = slots_[size_t(rank)];
  mine.call = &call;
  mine.record = record;
  bool stages = call.in.defined() && (call.kind != OpKind::Broadcast || call.peer == rank);
  mine.staged.resize(stages ? call.in.nbytes() : 0);
  if (stages && call.in.nbytes() > 0)
    std::memcpy(mine.staged.data(), call.in.data_ptr(), call.in.nbytes());
  meet(rank, comm, record, deadline_s);
  for (const Contribution& c : slots_) {
    if (c.record.seq == record.seq && same_call(c.record, record)) continue;
    std::ostringstream out;
    out << "collective mismatch on axis '" << comm.label << "': the ranks issued different calls:";
    for (size_t r = 0; r < slots_.size(); ++r)
      out << (r ? ";" : "") << " rank " << r << " [world " << world_ranks_[r]
          << "]: " << describe(slots_[r].record);
    world_->fail(out.str());
    world_->throw_failure(comm);
  }
  return slots_;
}

void Group::depart(int rank, const CommInfo& comm, const Record& record, double deadline_s) {
  meet(rank, comm, record, deadline_s);
}

std::shared_ptr<Group> Group::lane() {
  std::lock_guard lock(mutex_);
  if (!lane_) lane_ = std::make_shared<Group>(world_, world_ranks_, mailbox_);
  return lane_;
}

std::shared_ptr<Group> Group::child(uint64_t split_index, int color,
                                    const std::vector<int>& world_ranks) {
  std::lock_guard lock(mutex_);
  auto key = std::make_pair(split_index, color);
  auto it = children_.find(key);
  if (it == children_.end()) {
    auto g = std::make_shared<Group>(world_, world_ranks, std::make_shared<Mailbox>());
    it = children_.emplace(key, Pending{g, world_ranks.size()}).first;
  }
  std::shared_ptr<Group> g = it->second.group;
  if (--it->second.fetches_left == 0) children_.erase(it);
  return g;
}

std::string diagnose_in_process(const Record& stuck, const CommInfo& comm, WorldState& world,
                                double waited_s, double deadline_s) {
  PeerQuery q;
  q.label = stuck.label;
  q.seq = stuck.seq;
  q.p2p = !is_collective(stuck.kind);
  std::vector<PeerReply> replies(size_t(comm.size));
  for (int r = 0; r < comm.size; ++r)
    if (r != comm.rank) replies[size_t(r)] = world.context(comm.world_ranks[size_t(r)]).answer(q);
  return diagnose_hang(stuck, comm, waited_s, deadline_s, replies).message;
}

}  // namespace tessel::dist::threads
