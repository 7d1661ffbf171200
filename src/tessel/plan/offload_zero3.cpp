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
// Under expert parallelism the experts' units (one per MoE layer) follow the dense ones as a
// second axis of shards over the ranks holding the same experts, the step's holds recorded.
#include <algorithm>
#include <map>
#include <set>
#include <string>

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
  // The dense units over dp; under ep the experts' units (one per MoE layer, this rank's experts)
  // over the dp / ep ranks holding the same experts, after them (Trainer::zero3_units with the
  // experts taken out, train::expert_zero3_units).
  struct Axis {
    int64_t group = 1;                         // ranks the shards are over
    std::vector<std::string> names;            // per unit
    std::vector<std::vector<size_t>> tensors;  // per unit
    std::vector<Shard> s;
  };
  Axis dense{in.dp, {}, {}, {}}, experts{in.dp / in.ep, {}, {}, {}};
  for (const OffloadUnit& u : in.units) {
    std::vector<size_t> own;
    for (size_t t : u.tensors)
      if (in.tensors[t].expert_layer < 0) own.push_back(t);
    if (own.empty()) continue;
    dense.names.push_back(u.name);
    dense.tensors.push_back(std::move(own));
  }
  for (size_t t = 0; t < in.tensors.size(); ++t) {
    const int layer = in.tensors[t].expert_layer;
    if (layer < 0) continue;
    if (size_t(layer) >= experts.tensors.size()) {
      experts.tensors.resize(size_t(layer) + 1);
      experts.names.resize(size_t(layer) + 1);
    }
    experts.tensors[size_t(layer)].push_back(t);
    experts.names[size_t(layer)] = "MoE layer " + std::to_string(layer) + " experts";
  }
  for (const std::vector<size_t>& u : experts.tensors)
    TESSEL_CHECK(!u.empty(), "offload model: an MoE layer without experts among ",
                 experts.tensors.size());
  const size_t n = dense.tensors.size();
  // Bucket sizes: each unit's parameters, padded to a multiple of its axis' ranks.
  const auto padded_sizes = [&](const Axis& a) {
    std::vector<int64_t> padded;
    for (const std::vector<size_t>& u : a.tensors) {
      int64_t numel = 0;
      for (size_t t : u) numel += in.tensors[t].numel;
      padded.push_back((numel + a.group - 1) / a.group * a.group);
    }
    return padded;
  };
  const std::vector<int64_t> padded = padded_sizes(dense), expert_padded = padded_sizes(experts);
  // The full buffers go into chunks only when every one fits a chunk (Trainer::buckets_fit), and
  // never under ep (the experts' own buffers are plain memory beside them).
  const bool buckets_in_chunks =
      !in.tp_sums && in.ep == 1 && std::all_of(padded.begin(), padded.end(), [&](int64_t p) {
        return round_up(4 * p, kTensorAlignment) <= cb;
      });
  ChunkLists lists(cb);
  const auto lay_out = [&](Axis& a, const std::vector<int64_t>& sizes, bool full) {
    a.s.resize(a.tensors.size());
    for (size_t k = 0; k < a.tensors.size(); ++k) {
      const std::string& name = a.names[k];
      const int64_t shard = 4 * sizes[k] / a.group;
      a.s[k].param = lists.add(kParam, shard, name + " parameter shard");
      if (full) a.s[k].bucket = lists.add(kBucket, 4 * sizes[k], name + " gradient bucket");
      a.s[k].grad = lists.add(kGrad, shard, name + " gradient shard");
      a.s[k].m = lists.add(kMomentM, shard, name + " exp_avg shard");
      a.s[k].v = lists.add(kMomentV, shard, name + " exp_avg_sq shard");
    }
  };
  lay_out(dense, padded, buckets_in_chunks);
  lay_out(experts, expert_padded, false);
  const std::vector<Shard>& s = dense.s;
  RankSteps r;
  r.group_of = lists.group_of();
  r.state_bytes = lists.bytes();
  // OffloadStrategy's shard budgets: up to three gathers in flight per axis (each prefetches on
  // its own), three full buffers; the update's row of parameter, gradient and both moments'
  // shards.
  std::set<int> buckets;
  for (const Axis* a : {&dense, &experts}) {
    std::set<int> params;
    for (const Shard& x : a->s) {
      params.insert(x.param);
      if (x.bucket >= 0) buckets.insert(x.bucket);
    }
    r.working_set += std::min(3, int(params.size()));
  }
  r.working_set += std::min(3, int(buckets.size()));
  r.host_row = 4;

  // A chunk of full buffers is freed once every buffer in it is discarded this step.
  std::map<int, int> buffers, discarded;
  for (const Shard& x : s)
    if (x.bucket >= 0) ++buffers[x.bucket];
  StepWriter start(r.start);
  const auto free_gradients = [&](StepWriter& out) {  // OffloadStrategy::free_gradient_shards
    for (const Axis* a : {&dense, &experts})
      for (const Shard& x : a->s) {
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
          [&](const ShardHoldEvent& h) {
            const std::vector<Shard>& axis = h.expert ? experts.s : s;
            TESSEL_CHECK(h.bucket >= 0 && h.bucket < int64_t(axis.size()),
                         "offload model: a recorded hold of ", h.expert ? "expert " : "", "bucket ",
                         h.bucket, " of ", axis.size());
            const Shard& x = axis[axis.size() - 1 - size_t(h.bucket)];
            return h.part == ShardHoldEvent::Param    ? x.param
                   : h.part == ShardHoldEvent::Buffer ? x.bucket
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
    // The norm reads the gradient shards a run of one chunk at a time, in unit order (the dense
    // ones, then the experts').
    int last = -1;
    for (const Axis* a : {&dense, &experts})
      for (const Shard& x : a->s) {
        if (x.grad == last) continue;
        w.access(x.grad, Tier::Host, false);
        w.release(x.grad);
        last = x.grad;
      }
    // The scaling (1/grad_accum, a loss scale, clipping) writes each shard, in bucket order.
    if (in.micro_batches > 1 || in.scaled)
      for (const Axis* a : {&dense, &experts})
        for (size_t k = a->s.size(); k-- > 0;) {
          w.access(a->s[k].grad, Tier::Host, true);
          w.release(a->s[k].grad);
        }
    for (const Axis* a : {&dense, &experts})
      for (size_t k = a->s.size(); k-- > 0;) {  // the update, bucket by bucket
        const Shard& x = a->s[k];
        w.access(x.param, Tier::Host, true);
        w.access(x.m, Tier::Host, true);
        w.access(x.v, Tier::Host, true);
        w.access(x.grad, Tier::Host, false);
        for (int c : {x.grad, x.param, x.m, x.v}) w.release(c);
      }
    // A first pipeline stage gathers the tied embedding's unit to send its update to the last.
    for (size_t k = 0; k < n; ++k)
      for (size_t t : dense.tensors[k])
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
