// SPDX-License-Identifier: Apache-2.0
// Iteration-level scheduling (Orca, Yu et al. 2022) with chunked prefill (Sarathi, Agrawal et al.
// 2023) and preemption by recomputation (vLLM, Kwon et al. 2023). Every step takes, in order:
//   1. one decode token of every running sequence that is decoding, oldest request first;
//   2. the next prompt chunk of running sequences still prefilling, oldest first;
//   3. new sequences from the waiting queue, oldest first, while the sequence limit allows;
// all under one token budget, so a long prompt is split over steps and never stalls the streams
// already running. When the KV blocks run out, the newest running sequence is preempted: its
// blocks are freed and it goes back to the waiting queue with all of its tokens as its next
// prompt (whatever the prefix cache still holds is reused). No request fails because another
// arrived: the oldest running sequence can always proceed (the pool holds at least one
// full-length sequence).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tessel/serve/block_manager.h"
#include "tessel/serve/sequence.h"

namespace tessel::serve {

// A run of one sequence's tokens in this step: tokens [start, start + count) of seq->tokens at
// positions start.., with logits wanted for the last one when `sample` (its prompt is done).
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0, count = 0;
  bool sample = false;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<std::pair<BlockId, BlockId>> copies;  // KV blocks to copy before the step
  int64_t tokens = 0;
  int64_t preempted = 0;  // sequences preempted while planning it
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, int64_t max_batch_tokens, int64_t max_seqs);

  // Queues a sequence (new, or returning after preemption) in arrival order.
  void add_waiting(std::shared_ptr<Sequence> seq);
  // Admits an already started sequence straight into the running set (a forked choice).
  void add_running(std::shared_ptr<Sequence> seq);
  // The plan of the next step; the blocks of its chunks are allocated.
  StepPlan schedule();
  // After the step ran: the planned tokens of each chunk have their KV.
  void complete(const StepPlan& plan);
  // Removes a finished or cancelled sequence and frees its blocks (waiting or running).
  void remove(Sequence& seq);

  // Groups sharing one block manager (pool_priority.h): a waiting sequence is admitted only if
  // `gate` accepts it (default: every one).
  void set_admission_gate(std::function<bool(const Sequence&)> gate) { gate_ = std::move(gate); }

  const std::vector<std::shared_ptr<Sequence>>& running() const { return running_; }
  const std::vector<std::shared_ptr<Sequence>>& waiting() const { return waiting_; }
  int64_t preemptions() const { return preemptions_; }

 private:
  // Frees seq's blocks and moves it from running to waiting.
  void preempt(Sequence& seq);
  // Slots for `count` more tokens of a running sequence, preempting the newest others as needed;
  // false when seq itself had to be preempted.
  bool reserve(Sequence& seq, int64_t count, StepPlan& plan);
  bool admit(const std::shared_ptr<Sequence>& seq, int64_t budget, StepPlan& plan);

  BlockManager& blocks_;
  int64_t max_batch_tokens_, max_seqs_;
  std::vector<std::shared_ptr<Sequence>> running_;  // admission order
  std::vector<std::shared_ptr<Sequence>> waiting_;  // arrival order
  int64_t preemptions_ = 0;
  std::function<bool(const Sequence&)> gate_;
};

}  // namespace tessel::serve
