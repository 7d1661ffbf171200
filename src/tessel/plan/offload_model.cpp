// SPDX-License-Identifier: Apache-2.0
// The offload model's replay of a rank's chunk accesses (offload_steps.h) against the tiers'
// budgets (offload_model.h), with the memory layer's rules (memory/chunk_manager.cpp,
// chunk_mover.cpp, access_policy.cpp); tests/plan/offload_plan_check.py holds it beside measured
// runs. Prefetch is left out: it issues MIN's reads earlier (Cao et al. 1995), not more.
#include "tessel/plan/offload_model.h"

#include <algorithm>
#include <array>
#include <map>

#include "tessel/core/error.h"
#include "tessel/plan/offload_steps.h"

namespace tessel::plan {

namespace {

using offload::Event;
using offload::Tier;

// AccessPolicy's window (memory/access_policy.cpp): how far ahead an access that is not the
// expected one is searched for before the step counts as out of sync with the trace.
constexpr size_t kResyncWindow = 64;

// The tiers and the eviction policy, replayed access by access.
class Replay {
 public:
  Replay(int chunks, const OffloadBudgets& b, int64_t cb, int64_t slots)
      : cb_(cb),
        cap_dev_(b.device_budget / cb),
        cap_host_(b.host_budget / cb),
        nvme_(b.nvme),
        slots_(slots),
        c_(size_t(chunks)) {
    in_tier_[int(Tier::None)] = chunks;
  }

  // seal(): device first, then host, then NVMe, in chunk order.
  // Returns each chunk's tier.
  std::vector<Tier> place() {
    std::vector<Tier> tiers;
    for (Chunk& c : c_) {
      if (count(Tier::Device) < cap_dev_) {
        set_tier(c, Tier::Device);
      } else if (count(Tier::Host) < cap_host_) {
        set_tier(c, Tier::Host);
      } else {
        set_tier(c, Tier::Nvme);
        take_slot(-1);
        c.valid = c.slot = true;
      }
      tiers.push_back(c.tier);
    }
    return tiers;
  }
  void use_trace(std::vector<int> trace) {
    trace_ = std::move(trace);
    positions_.assign(c_.size(), {});
    for (size_t i = 0; i < trace_.size(); ++i) positions_[size_t(trace_[i])].push_back(i);
    cursor_ = 0;
    in_sync_ = true;
  }

  OffloadTraffic run(const std::vector<Event>& events, std::vector<int>* record) {
    t_ = {};
    for (const Event& e : events) {
      Chunk& c = c_[size_t(e.chunk)];
      if (e.kind == Event::Free) {
        set_tier(c, Tier::None);
        if (c.slot) --slots_used_;
        c.valid = c.slot = false;
        continue;
      }
      if (e.kind == Event::Release) {
        --c.refs;
        continue;
      }
      if (record) record->push_back(e.chunk);
      c.last_use = ++tick_;
      follow_trace(e.chunk);
      if (c.refs == 0) {
        if (c.tier == Tier::None) {
          make_room(e.tier, e.chunk);
          set_tier(c, e.tier);
        } else if (c.tier != e.tier) {
          c.moving = true;
          make_room(e.tier, e.chunk);
          c.moving = false;
          if (c.tier == Tier::Nvme) {
            t_.nvme_read_bytes += cb_;
          } else {
            (e.tier == Tier::Device ? t_.h2d_bytes : t_.d2h_bytes) += cb_;
          }
          set_tier(c, e.tier);
        }
      }
      if (e.write) c.valid = false;
      ++c.refs;
    }
    return t_;
  }

 private:
  struct Chunk {
    Tier tier = Tier::None;
    int refs = 0;
    bool valid = false, slot = false, moving = false;
    uint64_t last_use = 0;
  };
  // AccessPolicy::on_access: the position in the trace, resynchronised by searching ahead when
  // a step diverges from it (a pipeline rank's first step does); lost, eviction falls back to
  // LRU until the trace's first access comes round again.
  void follow_trace(int chunk) {
    if (trace_.empty()) return;
    if (cursor_ == trace_.size() && trace_[0] == chunk) {
      cursor_ = 1;
      in_sync_ = true;
      return;
    }
    if (!in_sync_) {
      if (chunk == trace_[0]) {
        cursor_ = 1;
        in_sync_ = true;
      }
      return;
    }
    const size_t end = std::min(trace_.size(), cursor_ + kResyncWindow);
    for (size_t p = cursor_; p < end; ++p)
      if (trace_[p] == chunk) {
        cursor_ = p + 1;
        return;
      }
    in_sync_ = false;
  }
  bool has_trace() const { return !trace_.empty() && in_sync_; }
  int64_t count(Tier t) const { return in_tier_[int(t)]; }
  // Every tier change goes through here, so the tiers' chunk counts stay current.
  void set_tier(Chunk& c, Tier t) {
    --in_tier_[int(c.tier)];
    ++in_tier_[int(t)];
    c.tier = t;
  }
  int64_t cap(Tier t) const { return t == Tier::Device ? cap_dev_ : cap_host_; }
  bool evictable(size_t i, Tier t, int exclude) const {
    const Chunk& c = c_[i];
    return c.tier == t && int(i) != exclude && !c.moving && c.refs == 0;
  }
  size_t next_use(size_t i) const {
    const std::vector<size_t>& pos = positions_[i];
    if (pos.empty()) return SIZE_MAX;
    const size_t step = trace_.size(), base = cursor_ / step * step;
    auto it = std::lower_bound(pos.begin(), pos.end(), cursor_ - base);
    return it != pos.end() ? base + *it : base + step + pos.front();
  }
  void make_room(Tier t, int exclude) {
    while (count(t) >= cap(t)) {
      int victim = -1;
      size_t best_next = 0;
      for (size_t i = 0; i < c_.size(); ++i) {
        if (!evictable(i, t, exclude)) continue;
        const bool clean = c_[i].valid && c_[i].slot;
        if (victim < 0) {
          victim = int(i);
          best_next = has_trace() ? next_use(i) : 0;
          continue;
        }
        const Chunk& v = c_[size_t(victim)];
        const bool vclean = v.valid && v.slot;
        bool better;
        if (!has_trace()) {
          better =
              c_[i].last_use < v.last_use || (c_[i].last_use == v.last_use && clean && !vclean);
        } else {
          const size_t next = next_use(i);
          better = next > best_next || (next == best_next && clean && !vclean);
          if (better) best_next = next;
        }
        if (better) victim = int(i);
      }
      TESSEL_CHECK(victim >= 0, "offload model: the ", t == Tier::Device ? "device" : "host",
                   " tier has no chunk to evict (", cap(t), " chunks, all held)");
      evict(size_t(victim));
    }
  }
  bool can_make_room(Tier t, int exclude) const {
    if (cap(t) < 1) return false;
    if (count(t) < cap(t)) return true;
    for (size_t i = 0; i < c_.size(); ++i)
      if (evictable(i, t, exclude)) return true;
    return false;
  }
  void evict(size_t i) {
    Chunk& c = c_[i];
    if (c.tier == Tier::Device && can_make_room(Tier::Host, int(i))) {
      make_room(Tier::Host, int(i));
      set_tier(c, Tier::Host);
      t_.d2h_bytes += cb_;
      return;
    }
    TESSEL_CHECK(nvme_, "offload model: no NVMe tier to evict chunk ", i, " to");
    ++t_.evictions;
    if (c.valid && c.slot) {
      ++t_.clean_evictions;
    } else {
      if (!c.slot) take_slot(int(i));
      t_.nvme_write_bytes += cb_;
      c.valid = c.slot = true;
    }
    set_tier(c, Tier::Nvme);
  }
  // ChunkManager::take_nvme_slot: a free slot, else the first chunk in memory (by id) that holds
  // one gives it back and with it its clean copy.
  void take_slot(int exclude) {
    if (slots_used_ < slots_) {
      ++slots_used_;
      return;
    }
    for (size_t i = 0; i < c_.size(); ++i) {
      Chunk& c = c_[i];
      if (int(i) == exclude || !c.slot || (c.tier != Tier::Device && c.tier != Tier::Host))
        continue;
      c.slot = c.valid = false;
      return;  // the slot changes hands: as many in use as before
    }
    TESSEL_FAIL("offload model: all ", slots_, " NVMe slots are in use and no chunk in memory ",
                "holds one to give back");
  }

  int64_t cb_, cap_dev_, cap_host_;
  bool nvme_;
  int64_t slots_, slots_used_ = 0;
  std::vector<Chunk> c_;
  int64_t in_tier_[4] = {};  // chunks per Tier
  std::vector<int> trace_;
  std::vector<std::vector<size_t>> positions_;
  size_t cursor_ = 0;  // the position of the next expected access, in [0, trace size]
  bool in_sync_ = true;
  uint64_t tick_ = 0;
  OffloadTraffic t_;
};

}  // namespace

OffloadPrediction predict_offload(const OffloadInput& in, int steps) {
  TESSEL_CHECK(steps >= 2, "offload model: simulate at least 2 steps, got ", steps);
  TESSEL_CHECK(in.budgets.chunk_bytes > 0, "memory.chunk_bytes must be > 0");
  TESSEL_CHECK(in.micro_batches >= 1, "offload model: micro-batches must be >= 1, got ",
               in.micro_batches);
  TESSEL_CHECK(in.compute == DType::F32 || in.compute == DType::BF16 || in.compute == DType::F16,
               "offload model: compute dtype ", dtype_name(in.compute),
               " is not one of f32, bf16, f16");
  {
    // Every parameter in exactly one unit, as the trainer requires of its units.
    std::vector<int> seen(in.tensors.size(), 0);
    for (const OffloadUnit& u : in.units)
      for (size_t t : u.tensors) {
        TESSEL_CHECK(t < in.tensors.size(), "offload model: unit '", u.name, "' names tensor ", t,
                     " of ", in.tensors.size());
        TESSEL_CHECK(++seen[t] == 1, "offload model: tensor '", in.tensors[t].name,
                     "' is in two units (the second: '", u.name, "')");
      }
    for (size_t t = 0; t < seen.size(); ++t)
      TESSEL_CHECK(seen[t] == 1, "offload model: tensor '", in.tensors[t].name,
                   "' belongs to no unit");
  }
  TESSEL_CHECK(in.dp >= 1, "offload model: dp ", in.dp, " must be >= 1");
  TESSEL_CHECK(in.dp == 1 || (in.zero_stage >= 1 && in.zero_stage <= 3), "offload model: under dp ",
               in.dp, " each rank offloads its ZeRO shards; ZeRO-", in.zero_stage,
               " keeps every state replicated (parallel.zero_stage 1, 2 or 3)");
  TESSEL_CHECK(in.dp == 1 || in.compute == DType::F32 || in.compute == DType::BF16,
               "offload model: ZeRO is modelled in f32 and bf16, not ", dtype_name(in.compute));
  TESSEL_CHECK(!in.pipeline.active() || in.dp == 1 || !in.recorded_holds.empty(),
               "offload model: a pipeline rank under dp ", in.dp,
               " needs the holds its DataParallel and Zero3Parameters take over the schedule "
               "(OffloadInput::recorded_holds)");
  TESSEL_CHECK(in.ep >= 1 && in.dp % in.ep == 0, "offload model: ep ", in.ep, " must divide dp ",
               in.dp);
  const bool has_experts = std::any_of(in.tensors.begin(), in.tensors.end(),
                                       [](const OffloadTensor& t) { return t.expert_layer >= 0; });
  TESSEL_CHECK(in.ep == 1 || (has_experts && in.zero_stage >= 1 && !in.recorded_holds.empty()),
               "offload model: an expert-parallel rank (ep ", in.ep,
               ") needs its experts' tensors, ZeRO-1, 2 or 3, and the holds its DataParallels and "
               "Zero3Parameters take (recorded_holds)");
  TESSEL_CHECK(in.ep > 1 || !has_experts,
               "offload model: tensors of an expert layer without expert parallelism");
  TESSEL_CHECK(in.recorded_holds.empty() || ((in.pipeline.active() || in.ep > 1) && in.dp > 1),
               "offload model: recorded holds are read for a pipeline or expert-parallel rank "
               "under dp only");
  OffloadPrediction p;
  const int64_t cb = offload::round_up(in.budgets.chunk_bytes, offload::kIoAlignment);
  p.chunk_bytes = cb;
  const offload::RankSteps rank = in.dp == 1           ? offload::one_process_steps(in, cb)
                                  : in.zero_stage == 3 ? offload::zero3_steps(in, cb)
                                                       : offload::zero12_steps(in, cb);
  const std::vector<int>& group_of = rank.group_of;
  p.chunks = int(group_of.size());
  p.state_bytes = rank.state_bytes;
  p.device_working_set = rank.working_set;

  // The trainer's checks at start (offload_strategy.cpp, offload_shards.cpp), with its smallest
  // budgets.
  const int64_t dev = in.budgets.device_budget, host = in.budgets.host_budget;
  TESSEL_CHECK(dev / cb >= p.device_working_set, "memory.device_budget of ", dev, " bytes holds ",
               dev / cb, " chunks of ", cb, " bytes, but one step holds ", p.device_working_set,
               " chunks in the device tier at once: the smallest device budget that works is ",
               int64_t(p.device_working_set) * cb, " bytes");
  TESSEL_CHECK(dev / cb >= 1 || p.chunks == 0, "memory.device_budget of ", dev,
               " bytes holds no chunk of ", cb, " bytes: the smallest device budget that works is ",
               cb);  // the chunk manager's own check (a ZeRO-1/2 rank may hold none in a step)
  const int64_t row = rank.host_row;
  TESSEL_CHECK(host / cb >= row, "memory.host_budget of ", host, " bytes holds ", host / cb,
               " chunks of ", cb, " bytes, but the CPU AdamW holds ", row,
               " in the host tier at once: the smallest host budget that works is ", row * cb,
               " bytes");
  TESSEL_CHECK(in.budgets.nvme || host / cb >= p.chunks, "memory.host_budget of ", host,
               " bytes holds ", host / cb, " of the ", p.chunks, " chunks of ", cb,
               " bytes; without memory.nvme_dir the host tier holds every chunk: the smallest "
               "host budget that works is ",
               int64_t(p.chunks) * cb, " bytes (or set memory.nvme_dir)");

  // NVMe slots, as seal() reserves and checks them.
  const int64_t n = p.chunks;
  TESSEL_CHECK(in.budgets.nvme_budget >= 0, "memory.nvme_budget must be >= 0, got ",
               in.budgets.nvme_budget);
  int64_t slots = !in.budgets.nvme              ? 0
                  : in.budgets.nvme_budget == 0 ? n
                                                : in.budgets.nvme_budget / cb;
  if (in.budgets.nvme && in.budgets.nvme_budget > 0) {
    TESSEL_CHECK(dev / cb + host / cb + slots >= n, "the ", n, " chunks of ", cb, " bytes (",
                 n * cb, " bytes) do not fit the tiers: memory.device_budget ", dev,
                 " + memory.host_budget ", host, " + NVMe ", slots * cb, " hold ",
                 dev / cb + host / cb + slots, " chunks; the smallest host budget that works is ",
                 host / cb * cb + (n - dev / cb - host / cb - slots) * cb,
                 " (or raise memory.nvme_budget)");
    // ChunkManager::check_nvme_budget: all but the chunks of the full tier, and the victim.
    const int64_t full = std::min(n, host / cb >= 1 ? host / cb : dev / cb);
    TESSEL_CHECK(slots >= n - full + 1, "memory.nvme_budget of ", in.budgets.nvme_budget,
                 " bytes holds ", slots, " chunks of ", cb, " bytes, but eviction can leave ",
                 n - full + 1, " of the ", n,
                 " chunks on NVMe at once: the smallest NVMe budget "
                 "that works is ",
                 (n - full + 1) * cb, " bytes");
    slots = std::min(slots, n);
  }
  for (int g = 0; g < offload::kNumGroups; ++g)
    if (std::count(group_of.begin(), group_of.end(), g) > 0)
      p.groups.push_back({offload::kGroupNames[g]});
  Replay r(p.chunks, in.budgets, cb, slots);
  const std::vector<Tier> placed = r.place();
  for (size_t i = 0; i < placed.size(); ++i) {
    OffloadGroup& x = *std::find_if(p.groups.begin(), p.groups.end(), [&](const OffloadGroup& y) {
      return y.name == offload::kGroupNames[group_of[i]];
    });
    ++x.chunks;
    ++(placed[i] == Tier::Device ? x.device : placed[i] == Tier::Host ? x.host : x.nvme);
    if (placed[i] == Tier::Nvme) p.start_nvme_write_bytes += cb;  // seal() writes it there
  }
  p.nvme_file_bytes = slots * cb;
  r.run(rank.start, nullptr);  // not part of any step
  const auto events = [&rank](int s) -> const std::vector<offload::Event>& {
    return size_t(s) < rank.first_steps.size() ? rank.first_steps[size_t(s)] : rank.step;
  };
  std::vector<int> trace;
  p.steps.push_back(r.run(events(0), &trace));
  r.use_trace(std::move(trace));
  for (int s = 1; s < steps; ++s) p.steps.push_back(r.run(events(s), nullptr));
  return p;
}

double offload_io_seconds(const OffloadTraffic& t, double read_bandwidth, double write_bandwidth) {
  TESSEL_CHECK(read_bandwidth > 0 && write_bandwidth > 0,
               "offload model: disk bandwidths must be > 0, got read ", read_bandwidth,
               " and write ", write_bandwidth, " bytes/s");
  return double(t.nvme_read_bytes) / read_bandwidth + double(t.nvme_write_bytes) / write_bandwidth;
}

}  // namespace tessel::plan
