// SPDX-License-Identifier: Apache-2.0
// A ZeRO-1 or ZeRO-2 data-parallel rank's chunks and accesses for the offload model
// (offload_steps.h), as the runtime makes them (train/strategy/offload_shards.cpp,
// parallel/data/data_parallel.cpp, parallel/zero/zero_optimizer.cpp, train/optim/grad_norm.cpp):
// the parameters stay replicated in plain memory; DataParallel's buckets (reverse model order,
// cut at parallel.bucket_mb) give each rank a row of chunks: at stage 2 the bucket's full
// gradient buffer (when every bucket fits a chunk) and this rank's gradient shard, at stage 1
// the whole all-reduced buffer (when every one fits), and both AdamW moments' shards. Backward
// holds a bucket's buffer in the device tier from its first gradient until its reduction is
// retired (the next launch retires it: one reduction in flight); stage 2's reduce_scatter writes
// the shard in the host tier and the buffer is then discarded; the norm, the scaling and the
// update read and write the gradients and moments in the host tier. Rank 0's view: stage 2's
// norm reads only the parameters that overlap its block of each bucket. Under mixed precision
// the replicas' 16-bit copies come first, in chunks of their own unit by unit (offload_copies.cpp):
// each unit holds its copies in the device tier around its forward and through its backward until
// its last gradient is ready (a pipeline rank: over the spans recorded with its ZeRO holds), and
// after the update every copy is rounded again in the host tier. Under expert parallelism the
// experts' buckets over their own group follow the dense ones (the step's holds recorded).
#include <algorithm>
#include <map>
#include <set>

#include "tessel/core/error.h"
#include "tessel/plan/memory_model.h"
#include "tessel/plan/offload_steps.h"

namespace tessel::plan::offload {

namespace {

struct Bucket {
  std::vector<size_t> tensors;  // in the order they were added (reverse model order)
  int64_t numel = 0, padded = 0;
  bool expert = false;  // the experts' own buckets, over their group of dp / ep ranks
  int64_t group = 1;    // ranks it is sharded over
  int flat = -1;        // the buffer backward writes (stage 2: full; stage 1: the all-reduced one)
  int shard = -1;       // stage 2: this rank's gradient shard; stage 1: -1
  int m = -1, v = -1;
};

}  // namespace

RankSteps zero12_steps(const OffloadInput& in, int64_t cb) {
  const int stage = in.zero_stage;
  const int64_t dp = in.dp;
  const size_t n = in.tensors.size();
  TESSEL_CHECK(stage == 1 || stage == 2, "offload model: zero12_steps at ZeRO-", stage);
  TESSEL_CHECK(in.bucket_bytes > 0, "offload model: bucket bytes ", in.bucket_bytes,
               " must be > 0");
  // (A pipeline rank's recorded holds say when each bucket completes instead.)
  TESSEL_CHECK(!in.recorded_holds.empty() || in.grad_order.size() == n,
               "offload model: the gradient order names ", in.grad_order.size(), " tensors of ", n);
  // DataParallel's buckets (plan_buckets: from the last parameter back, a new one when the next
  // would pass the bucket size), each tensor's place in its bucket's buffer: the dense
  // parameters' over dp, then under ep the experts' over their own group.
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of(n);
  std::vector<int64_t> offset(n);
  std::map<std::string, size_t> index;
  for (size_t t = 0; t < n; ++t) index[in.tensors[t].name] = t;
  for (const bool expert : {false, true}) {
    std::vector<std::pair<std::string, int64_t>> named;
    for (size_t t = 0; t < n; ++t)
      if ((in.tensors[t].expert_layer >= 0) == expert)
        named.emplace_back(in.tensors[t].name, in.tensors[t].numel);
    const int64_t group = expert ? dp / in.ep : dp;
    if (named.empty()) continue;
    for (const BucketPlan& plan : plan_buckets(named, int(group), in.bucket_bytes, true)) {
      Bucket& b = buckets.emplace_back();
      b.padded = plan.padded;
      b.expert = expert;
      b.group = group;
      for (const std::string& name : plan.params) {
        const size_t t = index.at(name);
        bucket_of[t] = buckets.size() - 1;
        offset[t] = b.numel;
        b.tensors.push_back(t);
        b.numel += in.tensors[t].numel;
      }
    }
  }
  const size_t dense_buckets = size_t(
      std::count_if(buckets.begin(), buckets.end(), [](const Bucket& b) { return !b.expert; }));
  // The dense buffers go into chunks when the largest fits one (Trainer::buckets_fit); under ep
  // at stage 2 they stay plain memory, as the experts' always do.
  int64_t largest = 0;
  for (const Bucket& b : buckets)
    if (!b.expert)
      largest =
          std::max(largest, round_up(4 * (stage == 2 ? b.padded : b.numel), kTensorAlignment));
  const bool in_chunks = !in.tp_sums && (stage == 1 || in.ep == 1) && largest <= cb;

  // The replicas' copies first, unit by unit in forward order (add_replica_copies), then the
  // buckets' rows (offload_shards.cpp): full buffer, gradient, both moments.
  ChunkLists lists(cb);
  const int64_t copy_size = dtype_size(in.compute);
  std::vector<int> copy_of(n, -1);
  for (const OffloadUnit& u : in.units)
    for (size_t t : u.tensors)
      if (in.tensors[t].copy)
        copy_of[t] =
            lists.add(kCopy, in.tensors[t].numel * copy_size, in.tensors[t].name + ".param16");
  const size_t nu = in.units.size();
  std::vector<std::vector<int>> unit_copies(nu);  // each unit's copies' chunks
  std::vector<size_t> unit_of(n, 0);
  for (size_t k = 0; k < nu; ++k) {
    for (size_t t : in.units[k].tensors) {
      unit_of[t] = k;
      if (copy_of[t] >= 0) unit_copies[k].push_back(copy_of[t]);
    }
    std::sort(unit_copies[k].begin(), unit_copies[k].end());
    unit_copies[k].erase(std::unique(unit_copies[k].begin(), unit_copies[k].end()),
                         unit_copies[k].end());
  }
  const bool copies = std::any_of(copy_of.begin(), copy_of.end(), [](int c) { return c >= 0; });
  for (size_t k = 0; k < buckets.size(); ++k) {
    Bucket& b = buckets[k];
    const std::string name = b.expert ? "expert bucket " + std::to_string(k - dense_buckets)
                                      : "bucket " + std::to_string(k);
    const int64_t shard = 4 * b.padded / b.group;
    if (stage == 2) {
      if (in_chunks && !b.expert)
        b.flat = lists.add(kBucket, 4 * b.padded, name + " gradient bucket");
      b.shard = lists.add(kGrad, shard, name + " gradient shard");
    } else if (in_chunks && !b.expert) {
      b.flat = lists.add(kGrad, 4 * b.numel, name + " gradient shard");
    }
    b.m = lists.add(kMomentM, shard, name + " exp_avg shard");
    b.v = lists.add(kMomentV, shard, name + " exp_avg_sq shard");
  }
  RankSteps r;
  r.group_of = lists.group_of();
  r.state_bytes = lists.bytes();
  // The start-up checks: three buffers in the device tier (the one reducing and the ones backward
  // fills); the update's row of the gradients and both moments in the host tier.
  std::set<int> flats;
  for (const Bucket& b : buckets)
    if (b.flat >= 0) flats.insert(b.flat);
  r.working_set = std::min(3, int(flats.size()));
  if (copies) {  // OffloadStrategy::build_units; under a pipeline every unit's copies at once
    int most = working_set(in, unit_copies);
    if (in.pipeline.active()) {
      std::set<int> all;
      for (const std::vector<int>& c : unit_copies) all.insert(c.begin(), c.end());
      most = std::max(most, int(all.size()));
    }
    r.working_set += most;
  }
  const bool grads = stage == 2 || in_chunks;
  r.host_row = 2 + (grads ? 1 : 0);

  // The gradient chunks hold no bytes before the first reduction writes them.
  const auto free_gradients = [&](EventWriter& out) {
    for (const Bucket& b : buckets) {
      if (b.shard >= 0) out.free(b.shard);
      if (b.flat >= 0) out.free(b.flat);
    }
  };
  EventWriter start(r.start);
  free_gradients(start);
  // Every copy rounded from its replica, a chunk at a time in the host tier (refresh_copies):
  // at start-up and after each update.
  const auto refresh = [&](EventWriter& out) {
    int held_copy = -1;
    for (size_t t = 0; t < n; ++t) {
      if (copy_of[t] < 0 || copy_of[t] == held_copy) continue;
      if (held_copy >= 0) out.release(held_copy);
      out.access(copy_of[t], Tier::Host, true);
      held_copy = copy_of[t];
    }
    if (held_copy >= 0) out.release(held_copy);
  };
  refresh(start);
  // A chunk of full buffers is freed once every buffer in it is discarded this step.
  std::map<int, int> buffers;
  if (stage == 2)
    for (const Bucket& b : buckets)
      if (b.flat >= 0) ++buffers[b.flat];
  // One step's events; `recorded`: a pipeline rank's holds for its schedule and gradient sync.
  const auto write_step = [&](std::vector<Event>& out,
                              const std::vector<ShardHoldEvent>* recorded) {
    EventWriter w(out);
    const auto hold_unit = [&](size_t k) {
      for (int c : unit_copies[k]) w.access(c, Tier::Device, false);
    };
    const auto let_go_unit = [&](size_t k) {
      for (int c : unit_copies[k]) w.release(c);
    };

    std::map<int, int> discarded;
    std::vector<char> held(buckets.size(), 0), shard_held(buckets.size(), 0);
    std::vector<int64_t> arrived(buckets.size(), 0), pending(buckets.size(), 0);
    size_t next_launch = 0, next_release = 0;
    const auto hold = [&](size_t k) {  // DataParallel::hold_bucket
      if (!in_chunks || held[k]) return;
      w.access(buckets[k].flat, Tier::Device, true);
      held[k] = 1;
    };
    const auto let_go = [&](size_t k) {
      if (!held[k]) return;
      w.release(buckets[k].flat);
      held[k] = 0;
    };
    const auto retire = [&](size_t keep) {  // DataParallel::retire_reductions
      while (next_launch - next_release > keep) {
        const size_t k = next_release++;
        if (shard_held[k]) {
          w.release(buckets[k].shard);
          shard_held[k] = 0;
        }
        let_go(k);
        if (stage == 2 && in_chunks && ++discarded[buckets[k].flat] == buffers[buckets[k].flat]) {
          discarded[buckets[k].flat] = 0;
          w.free(buckets[k].flat);
        }
      }
    };
    const auto launch_next = [&] {
      if (stage == 2 || in_chunks) retire(0);
      const size_t k = next_launch++;
      hold(k);
      if (stage == 2) {  // the reduce_scatter writes this rank's shard in the host tier
        w.access(buckets[k].shard, Tier::Host, true);
        shard_held[k] = 1;
      }
    };
    if (recorded) {
      // A unit's copies held over its recorded spans (append_recorded refuses them without).
      std::function<void(int64_t, bool)> copy_span;
      if (copies)
        copy_span = [&](int64_t k, bool take) {
          TESSEL_CHECK(k >= 0 && k < int64_t(nu), "offload model: a recorded hold of unit ", k,
                       "'s copies, of ", nu, " units");
          if (take)
            hold_unit(size_t(k));
          else
            let_go_unit(size_t(k));
        };
      append_recorded(
          *recorded,
          [&](const ShardHoldEvent& h) {
            const size_t first = h.expert ? dense_buckets : 0;
            const size_t count = h.expert ? buckets.size() - dense_buckets : dense_buckets;
            TESSEL_CHECK(
                h.bucket >= 0 && h.bucket < int64_t(count) && h.part != ShardHoldEvent::Param,
                "offload model: a recorded hold of ", h.expert ? "expert " : "", "bucket ",
                h.bucket, " of ", count, " (part ", int(h.part), ") at ZeRO-", stage);
            const Bucket& b = buckets[first + size_t(h.bucket)];
            return h.part == ShardHoldEvent::Buffer ? b.flat : b.shard;
          },
          buffers, w, copy_span);
    } else {
      std::vector<int64_t> unit_pending(nu);
      std::vector<char> unit_started(nu);
      for (int64_t mb = 0; mb < in.micro_batches; ++mb) {
        const bool sync = mb == in.micro_batches - 1;
        for (size_t k = 0; k < buckets.size(); ++k) pending[k] = int64_t(buckets[k].tensors.size());
        if (copies) {
          // Forward: the root's units held from the root's forward to its end, each other unit
          // around its own; backward meets the root's output first (its units in reverse order).
          for (size_t k = 0; k < nu; ++k)
            if (in.units[k].root) hold_unit(k);
          for (size_t k = 0; k < nu; ++k)
            if (!in.units[k].root) {
              hold_unit(k);
              let_go_unit(k);
            }
          for (size_t k = 0; k < nu; ++k)
            if (in.units[k].root) let_go_unit(k);
          for (size_t k = nu; k-- > 0;) {
            unit_pending[k] = int64_t(in.units[k].tensors.size());
            unit_started[k] = in.units[k].root;
            if (in.units[k].root) hold_unit(k);
          }
        }
        for (size_t t : in.grad_order) {
          const size_t u = unit_of[t];
          if (copies && !unit_started[u]) {  // backward reaches the unit's output
            hold_unit(u);
            unit_started[u] = 1;
          }
          const size_t k = bucket_of[t];
          hold(k);  // accumulate_held: backward writes the gradient into the held buffer
          if (in_chunks && ++arrived[k] == int64_t(buckets[k].tensors.size()) && !sync) {
            arrived[k] = 0;
            let_go(k);  // a no-sync backward delivered the whole bucket
          }
          if (sync && !in.tp_sums) {  // after tp's sums nothing launches before the step's sync
            --pending[k];
            while (next_launch < buckets.size() && pending[next_launch] == 0) launch_next();
          }
          // The unit's own grad-ready hook comes after DataParallel's (registered later): its last
          // gradient lets the unit's copies go.
          if (copies && --unit_pending[u] == 0) let_go_unit(u);
        }
      }
      // finish_gradient_sync: the rest launched, stage 2's laid-out buffers retired in order; what
      // is still held lets go as the step's state is reset.
      while (next_launch < buckets.size()) launch_next();
      if (stage == 2 && in_chunks) retire(0);
      for (size_t k = 0; k < buckets.size(); ++k) {
        let_go(k);
        if (shard_held[k]) {
          w.release(buckets[k].shard);
          shard_held[k] = 0;
        }
      }
    }
    // Whose gradients the norm, the scaling and the update read: stage 1's whole buffer, stage 2's
    // shard; none in chunks when stage 1's buffers are plain memory.
    const auto gradient = [&](const Bucket& b) { return stage == 2 ? b.shard : b.flat; };
    // The norm: the parameters in model order (the dense ones, then the experts'), a run of one
    // chunk held at a time (stage 2: the parameters that overlap rank 0's block of their bucket).
    int last = -1;
    for (const bool expert : {false, true})
      for (size_t t = 0; t < n; ++t) {
        const Bucket& b = buckets[bucket_of[t]];
        if (b.expert != expert || (stage == 2 && offset[t] >= b.padded / b.group)) continue;
        const int c = gradient(b);
        if (c < 0 || c == last) continue;
        w.access(c, Tier::Host, false);
        w.release(c);
        last = c;
      }
    // The scaling (1/grad_accum, a loss scale, clipping): each bucket's gradients, in bucket order.
    if (in.micro_batches > 1 || in.scaled)
      for (const Bucket& b : buckets)
        if (gradient(b) >= 0) {
          w.access(gradient(b), Tier::Host, true);
          w.release(gradient(b));
        }
    for (const Bucket& b : buckets) {  // the update, bucket by bucket
      w.access(b.m, Tier::Host, true);
      w.access(b.v, Tier::Host, true);
      if (gradient(b) >= 0) w.access(gradient(b), Tier::Host, false);
      if (gradient(b) >= 0) w.release(gradient(b));
      w.release(b.m);
      w.release(b.v);
    }
    free_gradients(w);
    refresh(w);
  };
  // Under a pipeline the replicas' copies follow the offload layer's unit spans, recorded among
  // the holds (every unit's, kept over the step's micro-batches: OffloadSetup::copies_span_step).
  write_steps(in, r, write_step);
  return r;
}

}  // namespace tessel::plan::offload
