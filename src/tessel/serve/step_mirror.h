// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel serving (Megatron-LM's split of each layer's heads and MLP columns, served as
// in DeepSpeed-Inference and EnergonAI): rank 0 of the group runs the HTTP front end, the
// scheduler and the block manager; every engine step it sends the packed batch (StepTensors plus
// the copy-on-write block copies) to the other ranks, every rank runs the model's forward over
// its own heads' KV pool, and the vocabulary-split logits of the rows that sample are gathered.
// The other ranks keep no bookkeeping: rank 0's slots and block tables say where every key and
// value goes, so their pools hold what rank 0's would hold, prefix-cache hits, copies and
// preemptions included.
//
// The wire protocol on the group's communicator, all from rank 0:
//   broadcast i64[6] header {kind, tokens N, sequences S, table width W, rows R, copies C};
//   kind kStep: broadcast i64 payload [ids N | positions N | slots N | seq_lens S |
//               query_starts S+1 | rows R | copies 2C | block tables S*W], then (R > 0) the
//               logits gather;
//   kind kIdle: rank 0 has no work; the others poll for a one-element message (tag kWakeTag)
//               with short sleeps instead of spinning in a collective, and rank 0 sends it before
//               its next header;
//   kind kStop: the others leave their loop (and exit 0).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/serve/block_allocator.h"
#include "tessel/serve/paged_kv_cache.h"

namespace tessel::serve {

class StepMirror {
 public:
  // [R, V_local] logits of this rank -> [R, V] (collective over the group; e.g. the
  // tensor-parallel glue's gather of the vocabulary-split LM head).
  using GatherLogits = std::function<Tensor(const Tensor&)>;

  StepMirror(dist::CommPtr group, GatherLogits gather);

  bool leader() const { return group_->rank() == 0; }
  int size() const { return group_->size(); }
  dist::Communicator& group() { return *group_; }

  // The smallest of every rank's value (collective).
  int64_t agree_min(int64_t value);
  // [R, V_local] -> [R, V]; nothing is exchanged for R = 0 (every rank knows R).
  Tensor gather_logits(const Tensor& local);

  // Rank 0.
  void send_step(const StepTensors& step, const std::vector<std::pair<BlockId, BlockId>>& copies);
  void send_idle();  // once per idle period
  void send_stop();

  // The other ranks: the next step, or false when rank 0 said stop.
  struct Received {
    StepTensors step;
    std::vector<std::pair<BlockId, BlockId>> copies;
  };
  bool receive(Received& out);

  static constexpr int kWakeTag = 7301;

 private:
  enum Kind : int64_t { kStep = 1, kIdle = 2, kStop = 3 };
  void send_header(Kind kind, int64_t n, int64_t s, int64_t w, int64_t r, int64_t c);
  void wake();
  void wait_for_wake();

  dist::CommPtr group_;
  GatherLogits gather_;
  bool idle_ = false;  // rank 0: the others are polling for the wake message
};

}  // namespace tessel::serve
