// SPDX-License-Identifier: Apache-2.0
// A ZeRO-3 data-parallel rank's chunks and accesses for the offload model (offload_steps.h), as
// the runtime makes them (train/strategy/offload_shards.cpp, parallel/zero/zero3.cpp,
// parallel/data/data_parallel.cpp, parallel/zero/zero_optimizer.cpp): each unit is one gradient
// bucket whose parameter, gradient and moments' shards (the bucket padded to a multiple of the dp
// size, divided by it) and full gradient buffer live in chunks. A unit's parameter shard is held
// in the device tier while its all_gather runs (the next unit's started ahead in backward); a
// bucket's full buffer from its first gradient until its reduce_scatter is retired (then
// discarded: a chunk is freed once every buffer in it is); the reduce_scatter writes the gradient
// shard in the host tier, where the norm, the scaling and the update (bucket by bucket) read it.
#include <algorithm>
#include <map>
#include <set>

#include "tessel/core/error.h"
#include "tessel/plan/offload_steps.h"

namespace tessel::plan::offload {

namespace {

struct Shard {
  int param = -1, bucket = -1, grad = -1, m = -1, v = -1;  // chunks; bucket -1: plain memory
};

class StepWriter : public EventWriter {
 public:
  using EventWriter::EventWriter;
  void gather(int c) {  // a whole all_gather, waited for
    access(c, Tier::Device, false);
    release(c);
  }
};

}  // namespace

RankSteps zero3_steps(const OffloadInput& in, int64_t cb) {
  const int64_t dp = in.dp;
  const size_t n = in.units.size();
  // Bucket sizes: each unit's parameters, padded to a multiple of dp.
  std::vector<int64_t> padded(n);
  for (size_t k = 0; k < n; ++k) {
    int64_t numel = 0;
    for (size_t t : in.units[k].tensors) numel += in.tensors[t].numel;
    padded[k] = (numel + dp - 1) / dp * dp;
  }
  // The full buffers go into chunks only when every one fits a chunk (Trainer::buckets_fit).
  const bool buckets_in_chunks =
      !in.tp_sums && std::all_of(padded.begin(), padded.end(), [&](int64_t p) {
        return round_up(4 * p, kTensorAlignment) <= cb;
      });
  ChunkLists lists(cb);
  std::vector<Shard> s(n);
  for (size_t k = 0; k < n; ++k) {
    const std::string& name = in.units[k].name;
    const int64_t shard = 4 * padded[k] / dp;
    s[k].param = lists.add(kParam, shard, name + " parameter shard");
    if (buckets_in_chunks)
      s[k].bucket = lists.add(kBucket, 4 * padded[k], name + " gradient bucket");
    s[k].grad = lists.add(kGrad, shard, name + " gradient shard");
    s[k].m = lists.add(kMomentM, shard, name + " exp_avg shard");
    s[k].v = lists.add(kMomentV, shard, name + " exp_avg_sq shard");
  }
  RankSteps r;
  r.group_of = lists.group_of();
  r.state_bytes = lists.bytes();
  // OffloadStrategy's shard budgets: up to three gathers in flight, three full buffers; the
  // update's row of parameter, gradient and both moments' shards.
  std::set<int> params, buckets;
  for (const Shard& x : s) {
    params.insert(x.param);
    if (x.bucket >= 0) buckets.insert(x.bucket);
  }
  r.working_set = std::min(3, int(params.size())) + std::min(3, int(buckets.size()));
  r.host_row = 4;

  // A chunk of full buffers is freed once every buffer in it is discarded this step.
  std::map<int, int> buffers, discarded;
  for (const Shard& x : s)
    if (x.bucket >= 0) ++buffers[x.bucket];
  StepWriter start(r.start);
  const auto free_gradients = [&](StepWriter& out) {  // OffloadStrategy::free_gradient_shards
    for (const Shard& x : s) {
      out.free(x.grad);
      if (x.bucket >= 0) out.free(x.bucket);
    }
  };
  free_gradients(start);

  // One step's events; `recorded`: a pipeline rank's holds for its schedule and gradient sync.
  const auto write_step = [&](std::vector<Event>& out,
                              const std::vector<ShardHoldEvent>* recorded) {
    StepWriter w(out);
    if (recorded) {
      // DataParallel's buckets are Zero3Parameters' units in reverse order (zero3_groups).
      append_recorded(
          *recorded,
          [&](ShardHoldEvent::Part part, int64_t b) {
            TESSEL_CHECK(b >= 0 && b < int64_t(n), "offload model: a recorded hold of bucket ", b,
                         " of ", n);
            const Shard& x = s[n - 1 - size_t(b)];
            return part == ShardHoldEvent::Param    ? x.param
                   : part == ShardHoldEvent::Buffer ? x.bucket
                                                    : x.grad;
          },
          buffers, w);
    } else {
      std::vector<size_t> roots, blocks;  // units in reverse order: backward's
      for (size_t k = n; k-- > 0;) (in.units[k].root ? roots : blocks).push_back(k);
      std::vector<size_t> pending;  // launched reductions not retired yet
      const auto retire_all = [&] {
        for (size_t k : pending) {
          w.release(s[k].grad);
          if (s[k].bucket < 0) continue;
          w.release(s[k].bucket);
          if (++discarded[s[k].bucket] == buffers[s[k].bucket]) {
            discarded[s[k].bucket] = 0;
            w.free(s[k].bucket);
          }
        }
        pending.clear();
      };
      const auto complete = [&](size_t k) {  // the bucket's last gradient: reduce_scatter it
        retire_all();
        w.access(s[k].grad, Tier::Host, true);
        pending.push_back(k);
      };
      const auto accumulate = [&](size_t k, bool sync) {  // the bucket's gradients arrive
        if (s[k].bucket < 0) return;
        w.access(s[k].bucket, Tier::Device, true);
        if (!sync) w.release(s[k].bucket);  // a no-sync micro-batch lets it go until the next
      };
      for (int64_t mb = 0; mb < in.micro_batches; ++mb) {
        const bool sync = mb == in.micro_batches - 1;
        for (size_t k = 0; k < n; ++k) w.gather(s[k].param);  // forward
        // Backward: the root's units are gathered again first, then the units from the last, each
        // one's successor gathered while it computes.
        for (size_t k : roots) w.gather(s[k].param);
        if (!blocks.empty()) w.gather(s[blocks[0]].param);
        for (size_t j = 0; j < blocks.size(); ++j) {
          const bool next = j + 1 < blocks.size();
          if (next) w.access(s[blocks[j + 1]].param, Tier::Device, false);
          accumulate(blocks[j], sync);
          if (sync && !in.tp_sums) complete(blocks[j]);
          if (next) w.release(s[blocks[j + 1]].param);
        }
        // The embeddings' gradients come last, together.
        for (size_t k : roots) accumulate(k, sync);
        if (sync && !in.tp_sums)
          for (size_t k : roots) complete(k);
      }
      // After tp's sums every bucket launches in order (bucket 0 is the last unit's).
      if (in.tp_sums)
        for (size_t k = n; k-- > 0;) complete(k);
      retire_all();  // finish_gradient_sync
    }
    // The norm reads the gradient shards a run of one chunk at a time, in unit order.
    int last = -1;
    for (const Shard& x : s) {
      if (x.grad == last) continue;
      w.access(x.grad, Tier::Host, false);
      w.release(x.grad);
      last = x.grad;
    }
    // The scaling (1/grad_accum, a loss scale, clipping) writes each shard, in bucket order.
    if (in.micro_batches > 1 || in.scaled)
      for (size_t k = n; k-- > 0;) {
        w.access(s[k].grad, Tier::Host, true);
        w.release(s[k].grad);
      }
    for (size_t k = n; k-- > 0;) {  // the update, bucket by bucket
      const Shard& x = s[k];
      w.access(x.param, Tier::Host, true);
      w.access(x.m, Tier::Host, true);
      w.access(x.v, Tier::Host, true);
      w.access(x.grad, Tier::Host, false);
      for (int c : {x.grad, x.param, x.m, x.v}) w.release(c);
    }
    // A first pipeline stage gathers the tied embedding's unit to send its update to the last.
    for (size_t k = 0; k < n; ++k)
      for (size_t t : in.units[k].tensors)
        if (std::find(in.tied.begin(), in.tied.end(), t) != in.tied.end()) {
          w.gather(s[k].param);
          break;
        }
    free_gradients(w);
  };
  write_steps(in, r, write_step);
  return r;
}

}  // namespace tessel::plan::offload
