// SPDX-License-Identifier: Apache-2.0
// The offload model's layout, one step's chunk accesses and their replay against the tiers'
// budgets (offload_model.h). The rules are the memory layer's (memory/chunk_manager.cpp,
// chunk_mover.cpp, access_policy.cpp) and the trainer's (train/strategy/offload_strategy.cpp,
// train/optim/offload_adamw.cpp); tests/plan/offload_plan_check.py holds the two side by side on
// measured runs. Prefetch is left out: it issues MIN's reads earlier (Cao et al. 1995), not more.
#include "tessel/plan/offload_model.h"

#include <algorithm>
#include <array>
#include <map>

#include "tessel/core/error.h"

namespace tessel::plan {

namespace {

constexpr int64_t kIoAlignment = 4096;    // memory/memory_config.h
constexpr int64_t kTensorAlignment = 64;  // a tensor's place in its chunk
constexpr const char* kGroups[] = {"param16", "param", "grad", "adam_m", "adam_v"};
enum Group { kCopy, kParam, kGrad, kMomentM, kMomentV, kNumGroups };
// The trainer's names for each group's tensor of a parameter (offload_strategy.cpp).
constexpr const char* kSuffixes[] = {".param16", "", ".grad", ".exp_avg", ".exp_avg_sq"};

int64_t round_up(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

enum class Tier { None, Device, Host, Nvme };  // None: freed, no bytes anywhere

// The chunk lists as ChunkManager::lay_out() builds them from the trainer's registrations.
struct Layout {
  std::vector<int> group_of;                    // per chunk
  std::vector<std::array<int, kNumGroups>> at;  // per tensor: its chunk in each group (-1: none)
};

Layout lay_out(const OffloadInput& in, int64_t cb, int64_t& state_bytes) {
  Layout l;
  int open[kNumGroups];
  int64_t used[kNumGroups] = {};
  std::fill(std::begin(open), std::end(open), -1);
  l.at.assign(in.tensors.size(), {-1, -1, -1, -1, -1});
  const int64_t copy_size = dtype_size(in.compute);
  for (const OffloadUnit& u : in.units)
    for (size_t t : u.tensors) {
      const OffloadTensor& x = in.tensors.at(t);
      for (int g = 0; g < kNumGroups; ++g) {
        if (g == kCopy && !x.copy) continue;
        const int64_t bytes = x.numel * (g == kCopy ? copy_size : 4);
        const int64_t need = round_up(bytes, kTensorAlignment);
        TESSEL_CHECK(need <= cb, "tensor ", x.name, kSuffixes[g], " (", bytes,
                     " bytes) does not fit a chunk of ", cb,
                     " bytes: memory.chunk_bytes must be at least ", round_up(need, kIoAlignment));
        if (open[g] < 0 || used[g] + need > cb) {
          open[g] = int(l.group_of.size());
          l.group_of.push_back(g);
          used[g] = 0;
        }
        used[g] += need;
        state_bytes += bytes;
        l.at[t][g] = open[g];
      }
    }
  return l;
}

struct Event {
  enum Kind { Access, Release, Free } kind;
  int chunk;
  Tier tier;
  bool write;
};

std::vector<int> unique_sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// One step's accesses, as the trainer's hooks and the offloaded AdamW make them on one process;
// `low`: the units compute with the 16-bit copies (a training step under mixed precision), not
// the f32 masters (an evaluation's forward reads those).
std::vector<Event> step_events(const OffloadInput& in, const Layout& l, bool low) {
  std::vector<std::vector<int>> fwd(in.units.size()), bwd(in.units.size());
  for (size_t k = 0; k < in.units.size(); ++k) {
    for (size_t t : in.units[k].tensors) {
      const auto& at = l.at[t];
      const int compute = low && at[kCopy] >= 0 ? at[kCopy] : at[kParam];
      fwd[k].push_back(compute);
      bwd[k].push_back(compute);
      bwd[k].push_back(at[kGrad]);
    }
    fwd[k] = unique_sorted(fwd[k]);
    bwd[k] = unique_sorted(bwd[k]);
  }
  std::vector<Event> ev;
  const auto hold = [&](const std::vector<int>& chunks, bool backward) {
    for (int c : chunks)
      ev.push_back({Event::Access, c, Tier::Device, backward && l.group_of[size_t(c)] == kGrad});
  };
  const auto let_go = [&](const std::vector<int>& chunks) {
    for (int c : chunks) ev.push_back({Event::Release, c, Tier::Device, false});
  };
  const size_t n = in.units.size();
  for (int64_t mb = 0; mb < in.micro_batches; ++mb) {
    // The root's units are held from the root's forward pre-hook to its post-hook; each other
    // unit around its own module.
    for (size_t k = 0; k < n; ++k)
      if (in.units[k].root) hold(fwd[k], false);
    for (size_t k = 0; k < n; ++k)
      if (!in.units[k].root) {
        hold(fwd[k], false);
        let_go(fwd[k]);
      }
    for (size_t k = 0; k < n; ++k)
      if (in.units[k].root) let_go(fwd[k]);
    // Backward meets the root's output first (its identity nodes in reverse registration order),
    // then each unit from the last; a unit lets go once its gradients are complete, the root's
    // (the embeddings, read again by a tied head) at the very end.
    for (size_t k = n; k-- > 0;)
      if (in.units[k].root) hold(bwd[k], true);
    for (size_t k = n; k-- > 0;)
      if (!in.units[k].root) {
        hold(bwd[k], true);
        let_go(bwd[k]);
      }
    for (size_t k = n; k-- > 0;)
      if (in.units[k].root) let_go(bwd[k]);
  }
  // The optimizer's rows: one per parameter chunk, in the order its parameters come.
  std::vector<int> rows;
  std::map<int, std::vector<size_t>> members;
  for (size_t t = 0; t < in.tensors.size(); ++t) {
    const int pc = l.at[t][kParam];
    if (members.find(pc) == members.end()) rows.push_back(pc);
    members[pc].push_back(t);
  }
  const auto row_chunk = [&](int pc, int g) { return l.at[members[pc].front()][g]; };
  for (int pc : rows) {  // the gradient norm
    ev.push_back({Event::Access, row_chunk(pc, kGrad), Tier::Host, false});
    ev.push_back({Event::Release, row_chunk(pc, kGrad), Tier::Host, false});
  }
  for (int pc : rows) {  // the update, the masters rounded into their copies
    const int chunks[] = {pc, row_chunk(pc, kGrad), row_chunk(pc, kMomentM),
                          row_chunk(pc, kMomentV)};
    for (int c : chunks) ev.push_back({Event::Access, c, Tier::Host, true});
    int copy = -1;
    for (size_t t : members[pc]) {
      const int cc = l.at[t][kCopy];
      if (cc < 0 || cc == copy) continue;
      if (copy >= 0) ev.push_back({Event::Release, copy, Tier::Host, false});
      ev.push_back({Event::Access, cc, Tier::Host, true});
      copy = cc;
    }
    if (copy >= 0) ev.push_back({Event::Release, copy, Tier::Host, false});
    for (int i = 3; i >= 0; --i) ev.push_back({Event::Release, chunks[i], Tier::Host, false});
    ev.push_back({Event::Free, chunks[1], Tier::None, false});
  }
  return ev;
}

// Start-up under mixed precision: every master rounded into its copy, the two chunks held in the
// host tier in turn (OffloadStrategy::refresh_copies), before the first step.
std::vector<Event> start_events(const OffloadInput& in, const Layout& l) {
  std::vector<Event> ev;
  int held[2] = {-1, -1};  // the master's chunk, the copy's
  const auto hold = [&](int& h, int id, bool write) {
    if (h == id) return;
    if (h >= 0) ev.push_back({Event::Release, h, Tier::Host, false});
    ev.push_back({Event::Access, id, Tier::Host, write});
    h = id;
  };
  for (size_t t = 0; t < in.tensors.size(); ++t) {
    if (l.at[t][kCopy] < 0) continue;
    hold(held[0], l.at[t][kParam], false);
    hold(held[1], l.at[t][kCopy], true);
  }
  for (int h : {held[1], held[0]})
    if (h >= 0) ev.push_back({Event::Release, h, Tier::Host, false});
  return ev;
}

// The tiers and the eviction policy, replayed access by access.
class Replay {
 public:
  Replay(int chunks, const OffloadBudgets& b, int64_t cb)
      : cb_(cb),
        cap_dev_(b.device_budget / cb),
        cap_host_(b.host_budget / cb),
        nvme_(b.nvme),
        c_(size_t(chunks)) {
    in_tier_[int(Tier::None)] = chunks;
  }

  // seal(): device first, then host, then NVMe, in chunk order.
  int64_t place() {
    int64_t written = 0;
    for (Chunk& c : c_) {
      if (count(Tier::Device) < cap_dev_) {
        set_tier(c, Tier::Device);
      } else if (count(Tier::Host) < cap_host_) {
        set_tier(c, Tier::Host);
      } else {
        set_tier(c, Tier::Nvme);
        c.valid = c.slot = true;
        written += cb_;
      }
    }
    return written;
  }
  void use_trace(std::vector<int> trace) {
    trace_ = std::move(trace);
    positions_.assign(c_.size(), {});
    for (size_t i = 0; i < trace_.size(); ++i) positions_[size_t(trace_[i])].push_back(i);
    cursor_ = 0;
  }

  OffloadTraffic run(const std::vector<Event>& events, std::vector<int>* record, int* most_held) {
    t_ = {};
    for (const Event& e : events) {
      Chunk& c = c_[size_t(e.chunk)];
      if (e.kind == Event::Free) {
        set_tier(c, Tier::None);
        c.valid = c.slot = false;
        continue;
      }
      if (e.kind == Event::Release) {
        --c.refs;
        if (c.refs == 0 && c.tier == Tier::Device) --held_;
        continue;
      }
      if (record) record->push_back(e.chunk);
      c.last_use = ++tick_;
      if (!trace_.empty()) cursor_ = cursor_ + 1;
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
        if (e.tier == Tier::Device) ++held_;
        if (most_held) *most_held = std::max(*most_held, held_);
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
          best_next = trace_.empty() ? 0 : next_use(i);
          continue;
        }
        const Chunk& v = c_[size_t(victim)];
        const bool vclean = v.valid && v.slot;
        bool better;
        if (trace_.empty()) {
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
      t_.nvme_write_bytes += cb_;
      c.valid = c.slot = true;
    }
    set_tier(c, Tier::Nvme);
  }

  int64_t cb_, cap_dev_, cap_host_;
  bool nvme_;
  std::vector<Chunk> c_;
  int64_t in_tier_[4] = {};  // chunks per Tier
  std::vector<int> trace_;
  std::vector<std::vector<size_t>> positions_;
  size_t cursor_ = 0;
  uint64_t tick_ = 0;
  int held_ = 0;
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
  OffloadPrediction p;
  const int64_t cb = round_up(in.budgets.chunk_bytes, kIoAlignment);
  p.chunk_bytes = cb;
  const Layout l = lay_out(in, cb, p.state_bytes);
  p.chunks = int(l.group_of.size());
  const bool copies = std::count(l.group_of.begin(), l.group_of.end(), int(kCopy)) > 0;
  const std::vector<Event> events = step_events(in, l, copies);

  // The trainer's checks at start (offload_strategy.cpp), with its smallest budgets. Its
  // working set counts the f32 masters' units too, which an evaluation holds.
  for (bool low : {false, true}) {
    if (low && !copies) continue;
    Replay probe(p.chunks, {cb, int64_t(p.chunks) * cb, int64_t(p.chunks) * cb, false}, cb);
    probe.place();
    probe.run(low == copies ? events : step_events(in, l, low), nullptr, &p.device_working_set);
  }
  const int64_t dev = in.budgets.device_budget, host = in.budgets.host_budget;
  TESSEL_CHECK(dev / cb >= p.device_working_set, "memory.device_budget of ", dev, " bytes holds ",
               dev / cb, " chunks of ", cb, " bytes, but one step holds ", p.device_working_set,
               " chunks in the device tier at once: the smallest device budget that works is ",
               int64_t(p.device_working_set) * cb, " bytes");
  const int64_t row = copies ? 5 : 4;
  TESSEL_CHECK(host / cb >= row, "memory.host_budget of ", host, " bytes holds ", host / cb,
               " chunks of ", cb, " bytes, but the CPU AdamW holds ", row,
               " in the host tier at once: the smallest host budget that works is ", row * cb,
               " bytes");
  TESSEL_CHECK(in.budgets.nvme || host / cb >= p.chunks, "memory.host_budget of ", host,
               " bytes holds ", host / cb, " of the ", p.chunks, " chunks of ", cb,
               " bytes; without memory.nvme_dir the host tier holds every chunk: the smallest "
               "host budget that works is ",
               int64_t(p.chunks) * cb, " bytes (or set memory.nvme_dir)");

  for (int g = 0; g < kNumGroups; ++g)
    if (std::count(l.group_of.begin(), l.group_of.end(), g) > 0) p.groups.push_back({kGroups[g]});
  Replay r(p.chunks, in.budgets, cb);
  p.start_nvme_write_bytes = r.place();
  {
    // Where seal() put each group's chunks.
    int64_t d = dev / cb, h = host / cb;
    for (size_t i = 0; i < l.group_of.size(); ++i) {
      OffloadGroup& g = *std::find_if(p.groups.begin(), p.groups.end(), [&](const OffloadGroup& x) {
        return x.name == kGroups[l.group_of[i]];
      });
      ++g.chunks;
      if (d > 0) {
        --d;
        ++g.device;
      } else if (h > 0) {
        --h;
        ++g.host;
      } else {
        ++g.nvme;
      }
    }
  }
  p.nvme_file_bytes = in.budgets.nvme ? int64_t(p.chunks) * cb : 0;
  if (copies) r.run(start_events(in, l), nullptr, nullptr);  // not part of any step
  std::vector<int> trace;
  p.steps.push_back(r.run(events, &trace, nullptr));
  r.use_trace(std::move(trace));
  for (int s = 1; s < steps; ++s) p.steps.push_back(r.run(events, nullptr, nullptr));
  return p;
}

double offload_io_seconds(const OffloadTraffic& t, double read_bandwidth, double write_bandwidth) {
  TESSEL_CHECK(read_bandwidth > 0 && write_bandwidth > 0,
               "offload model: disk bandwidths must be > 0, got read ", read_bandwidth,
               " and write ", write_bandwidth, " bytes/s");
  return double(t.nvme_read_bytes) / read_bandwidth + double(t.nvme_write_bytes) / write_bandwidth;
}

}  // namespace tessel::plan
