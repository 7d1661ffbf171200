// SPDX-License-Identifier: Apache-2.0
// The step planner: decode tokens first, then prompt chunks, then admissions, under one budget;
// preemption of the newest sequence when blocks run out.
#include "tessel/serve/scheduler.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel::serve {
namespace {

// Older first: the request's arrival, then the choice.
bool older(const Sequence& a, const Sequence& b) {
  if (a.request->arrival != b.request->arrival) return a.request->arrival < b.request->arrival;
  return a.choice < b.choice;
}

void insert_ordered(std::vector<std::shared_ptr<Sequence>>& list, std::shared_ptr<Sequence> seq) {
  auto at = std::upper_bound(list.begin(), list.end(), seq,
                             [](const auto& a, const auto& b) { return older(*a, *b); });
  list.insert(at, std::move(seq));
}

void erase(std::vector<std::shared_ptr<Sequence>>& list, const Sequence& seq) {
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& s) { return s.get() == &seq; });
  if (it != list.end()) list.erase(it);
}

bool planned(const StepPlan& plan, const Sequence& seq) {
  return std::any_of(plan.chunks.begin(), plan.chunks.end(),
                     [&](const ScheduledChunk& c) { return c.seq == &seq; });
}

}  // namespace

Scheduler::Scheduler(BlockManager& blocks, int64_t max_batch_tokens, int64_t max_seqs)
    : blocks_(blocks), max_batch_tokens_(max_batch_tokens), max_seqs_(max_seqs) {
  TESSEL_CHECK(max_batch_tokens >= 1 && max_seqs >= 1, "Scheduler: max_batch_tokens ",
               max_batch_tokens, " and max_seqs ", max_seqs, " must be >= 1");
}

void Scheduler::add_waiting(std::shared_ptr<Sequence> seq) {
  TESSEL_CHECK(seq && !seq->tokens.empty(), "Scheduler.add_waiting: a sequence without tokens");
  seq->state = SeqState::kWaiting;
  insert_ordered(waiting_, std::move(seq));
}

void Scheduler::add_running(std::shared_ptr<Sequence> seq) {
  TESSEL_CHECK(blocks_.has_sequence(seq->id), "Scheduler.add_running: sequence ", seq->id,
               " has no blocks");
  seq->state = SeqState::kRunning;
  insert_ordered(running_, std::move(seq));
}

void Scheduler::preempt(Sequence& seq) {
  blocks_.free_sequence(seq.id);
  seq.computed = 0;
  ++seq.preemptions;
  ++preemptions_;
  std::shared_ptr<Sequence> keep;
  for (const auto& s : running_)
    if (s.get() == &seq) keep = s;
  erase(running_, seq);
  add_waiting(std::move(keep));
}

bool Scheduler::reserve(Sequence& seq, int64_t count, StepPlan& plan) {
  while (!blocks_.append_slots(seq.id, count, plan.copies)) {
    // The newest running sequence not already in this step gives its blocks back.
    Sequence* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (!planned(plan, **it)) {
        victim = it->get();
        break;
      }
    }
    TESSEL_CHECK(victim != nullptr, "Scheduler: no sequence to preempt for sequence ", seq.id);
    preempt(*victim);
    ++plan.preempted;
    if (victim == &seq) return false;
  }
  return true;
}

bool Scheduler::admit(const std::shared_ptr<Sequence>& seq, int64_t budget, StepPlan& plan) {
  const std::span<const int64_t> tokens(seq->tokens);
  const int64_t cached = blocks_.cached_prefix(tokens);
  const int64_t chunk = std::min<int64_t>(int64_t(tokens.size()) - cached, budget);
  const int64_t need = blocks_.blocks_needed_to_begin(tokens, cached + chunk);
  // Headroom for the running sequences' next tokens, so an admission does not force a
  // preemption on the very next step; an idle engine admits whatever fits.
  const int64_t headroom = running_.empty() ? 0 : std::max<int64_t>(1, blocks_.num_blocks() / 100);
  if (need > blocks_.free_blocks() - headroom) return false;
  const int64_t computed = blocks_.begin_sequence(seq->id, tokens);
  TESSEL_CHECK(computed == cached, "Scheduler: the prefix cache reused ", computed,
               " tokens where ", cached, " were looked up");
  const bool ok = blocks_.append_slots(seq->id, chunk, plan.copies);
  TESSEL_CHECK(ok, "Scheduler: ", need, " blocks for sequence ", seq->id,
               " were free but could not be allocated");
  seq->computed = computed;
  erase(waiting_, *seq);
  add_running(seq);
  plan.chunks.push_back({seq.get(), computed, chunk, computed + chunk == int64_t(tokens.size())});
  plan.tokens += chunk;
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = max_batch_tokens_;
  // A copy: preemption edits running_ while these loops walk it.
  const std::vector<std::shared_ptr<Sequence>> order = running_;
  auto still_running = [&](const Sequence& s) { return s.state == SeqState::kRunning; };
  for (const auto& seq : order) {  // 1. decode tokens
    if (budget == 0) break;
    if (!still_running(*seq) || !seq->decoding()) continue;
    if (!reserve(*seq, 1, plan)) continue;
    plan.chunks.push_back({seq.get(), seq->computed, 1, true});
    plan.tokens += 1;
    budget -= 1;
  }
  for (const auto& seq : order) {  // 2. prompt chunks of running sequences
    if (budget == 0) break;
    if (!still_running(*seq) || seq->decoding() || planned(plan, *seq)) continue;
    const int64_t count = std::min(seq->pending(), budget);
    if (count <= 0 || !reserve(*seq, count, plan)) continue;
    plan.chunks.push_back(
        {seq.get(), seq->computed, count, seq->computed + count == int64_t(seq->tokens.size())});
    plan.tokens += count;
    budget -= count;
  }
  // 3. admissions, unless this step already had to preempt (memory is short).
  while (plan.preempted == 0 && budget > 0 && !waiting_.empty() &&
         int64_t(running_.size()) < max_seqs_) {
    const std::shared_ptr<Sequence> next = waiting_.front();
    if ((gate_ && !gate_(*next)) || !admit(next, budget, plan)) break;
    budget = max_batch_tokens_ - plan.tokens;
  }
  return plan;
}

void Scheduler::complete(const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.seq->state != SeqState::kRunning) continue;
    c.seq->computed = c.start + c.count;
    blocks_.mark_computed(c.seq->id, c.seq->tokens, c.seq->computed);
  }
}

void Scheduler::remove(Sequence& seq) {
  if (blocks_.has_sequence(seq.id)) blocks_.free_sequence(seq.id);
  erase(running_, seq);
  erase(waiting_, seq);
  seq.state = SeqState::kFinished;
}

}  // namespace tessel::serve
