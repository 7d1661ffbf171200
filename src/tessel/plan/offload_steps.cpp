// SPDX-License-Identifier: Apache-2.0
// One process's (or one tensor-parallel rank's) chunks and accesses for the offload model
// (offload_steps.h), as train/strategy/offload_strategy.cpp lays out and holds them and
// train/optim/offload_adamw.cpp updates them.
#include "tessel/plan/offload_steps.h"

#include <algorithm>
#include <map>
#include <set>

#include "tessel/core/error.h"

namespace tessel::plan::offload {

namespace {

// The trainer's names for each group's tensor of a parameter (offload_strategy.cpp).
constexpr const char* kSuffixes[] = {".param16", "", "", ".grad", ".exp_avg", ".exp_avg_sq"};

std::vector<int> unique_sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

using Chunks = std::vector<std::array<int, kNumGroups>>;  // per tensor, its chunk per group

// One step's accesses; `low`: the units compute with the 16-bit copies (a training step under
// mixed precision), not the f32 masters.
std::vector<Event> step_events(const OffloadInput& in, const Chunks& at,
                               const std::vector<int>& group_of, bool low,
                               std::vector<std::vector<int>>* backward_held = nullptr) {
  std::vector<std::vector<int>> fwd(in.units.size()), bwd(in.units.size());
  for (size_t k = 0; k < in.units.size(); ++k) {
    for (size_t t : in.units[k].tensors) {
      const int compute = low && at[t][kCopy] >= 0 ? at[t][kCopy] : at[t][kParam];
      fwd[k].push_back(compute);
      bwd[k].push_back(compute);
      bwd[k].push_back(at[t][kGrad]);
    }
    fwd[k] = unique_sorted(fwd[k]);
    bwd[k] = unique_sorted(bwd[k]);
  }
  if (backward_held) *backward_held = bwd;
  std::vector<Event> ev;
  const auto hold = [&](const std::vector<int>& chunks, bool backward) {
    for (int c : chunks)
      ev.push_back({Event::Access, c, Tier::Device, backward && group_of[size_t(c)] == kGrad});
  };
  const auto let_go = [&](const std::vector<int>& chunks) {
    for (int c : chunks) ev.push_back({Event::Release, c, Tier::Device, false});
  };
  const size_t n = in.units.size();
  // A pipeline rank runs its stages' units in its schedule's order, each around its own modules.
  // Under mixed precision one set of copies serves every micro-batch, so a unit's gradients
  // complete only in its stage's last backward: from its first backward until then the unit
  // keeps its copies and gradients held (OffloadSetup::copies_span_step).
  const bool span = low && in.pipeline.active();
  std::map<int, size_t> last_backward;  // stage -> index of its last Backward action
  for (size_t i = 0; i < in.pipeline.actions.size(); ++i)
    if (in.pipeline.actions[i].kind == PipelineActionKind::Backward)
      last_backward[in.pipeline.actions[i].stage] = i;
  std::vector<char> in_backward(n, 0);
  for (size_t i = 0; i < in.pipeline.actions.size(); ++i) {
    const PipelineAction& a = in.pipeline.actions[i];
    if (a.kind == PipelineActionKind::Forward) {
      for (size_t k = 0; k < n; ++k)
        if (in.units[k].stage == a.stage) {
          hold(fwd[k], false);
          let_go(fwd[k]);
        }
    } else if (a.kind == PipelineActionKind::Backward) {
      for (size_t k = n; k-- > 0;)
        if (in.units[k].stage == a.stage) {
          if (!in_backward[k]) hold(bwd[k], true);
          in_backward[k] = 1;
          if (!span || i == last_backward[a.stage]) {
            let_go(bwd[k]);
            in_backward[k] = 0;
          }
        }
    }
  }
  // The first stage adds the head's gradient of a tied embedding, from the last stage, into its
  // own, after the schedule.
  for (size_t t : in.tied) {
    ev.push_back({Event::Access, at[t][kGrad], Tier::Host, true});
    ev.push_back({Event::Release, at[t][kGrad], Tier::Host, false});
  }
  for (int64_t mb = 0; mb < (in.pipeline.active() ? 0 : in.micro_batches); ++mb) {
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
    const int pc = at[t][kParam];
    if (members.find(pc) == members.end()) rows.push_back(pc);
    members[pc].push_back(t);
  }
  const auto row_chunk = [&](int pc, int g) { return at[members[pc].front()][g]; };
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
      const int cc = at[t][kCopy];
      if (cc < 0 || cc == copy) continue;
      if (copy >= 0) ev.push_back({Event::Release, copy, Tier::Host, false});
      ev.push_back({Event::Access, cc, Tier::Host, true});
      copy = cc;
    }
    if (copy >= 0) ev.push_back({Event::Release, copy, Tier::Host, false});
    for (int i = 3; i >= 0; --i) ev.push_back({Event::Release, chunks[i], Tier::Host, false});
    ev.push_back({Event::Free, chunks[1], Tier::None, false});
  }
  for (size_t t : in.tied) {  // and sends the updated weight to the last stage
    ev.push_back({Event::Access, at[t][kParam], Tier::Host, false});
    ev.push_back({Event::Release, at[t][kParam], Tier::Host, false});
  }
  return ev;
}

}  // namespace

int working_set(const OffloadInput& in, const std::vector<std::vector<int>>& held) {
  std::set<int> root;
  const bool any_root =
      std::any_of(in.units.begin(), in.units.end(), [](const OffloadUnit& u) { return u.root; });
  for (size_t k = 0; k < in.units.size(); ++k)
    if (in.units[k].root || (!any_root && k == 0)) root.insert(held[k].begin(), held[k].end());
  int most = int(root.size());
  for (size_t k = 0; k < in.units.size(); ++k) {
    std::set<int> both = root;
    both.insert(held[k].begin(), held[k].end());
    most = std::max(most, int(both.size()));
  }
  return most;
}

void append_recorded(const std::vector<ShardHoldEvent>& holds,
                     const std::function<int(const ShardHoldEvent&)>& chunk_of,
                     const std::map<int, int>& buffers, EventWriter& out,
                     const std::function<void(int64_t unit, bool hold)>& copies) {
  std::map<int, int> discarded;
  for (const ShardHoldEvent& h : holds) {
    if (h.part == ShardHoldEvent::Copies) {
      TESSEL_CHECK(copies && h.kind != ShardHoldEvent::Discard,
                   "offload model: a recorded hold of unit ", h.bucket,
                   "'s 16-bit copies, which this rank's state does not have");
      copies(h.bucket, h.kind == ShardHoldEvent::Hold);
      continue;
    }
    const int c = chunk_of(h);
    if (c < 0) continue;  // plain memory: the runtime holds nothing
    if (h.kind == ShardHoldEvent::Hold) {
      out.access(c, h.device ? Tier::Device : Tier::Host, h.write);
    } else if (h.kind == ShardHoldEvent::Release) {
      out.release(c);
    } else {  // OffloadStrategy::bucket_hold's discard
      auto it = buffers.find(c);
      TESSEL_CHECK(it != buffers.end(), "offload model: a recorded discard of chunk ", c,
                   ", which holds no full gradient buffer");
      if (++discarded[c] == it->second) {
        discarded[c] = 0;
        out.free(c);
      }
    }
  }
}

void write_steps(const OffloadInput& in, RankSteps& r, const StepEventsWriter& write_step) {
  if (in.recorded_holds.empty()) return write_step(r.step, nullptr);
  for (size_t i = 0; i < in.recorded_holds.size(); ++i)
    write_step(i + 1 < in.recorded_holds.size() ? r.first_steps.emplace_back() : r.step,
               &in.recorded_holds[i]);
}

int ChunkLists::add(int group, int64_t bytes, const std::string& name) {
  const int64_t need = round_up(bytes, kTensorAlignment);
  TESSEL_CHECK(need <= cb_, "tensor ", name, " (", bytes, " bytes) does not fit a chunk of ", cb_,
               " bytes: memory.chunk_bytes must be at least ", round_up(need, kIoAlignment));
  const size_t g = size_t(group);
  if (open_[g] < 0 || used_[g] + need > cb_) {
    open_[g] = int(group_of_.size());
    group_of_.push_back(group);
    used_[g] = 0;
  }
  used_[g] += need;
  bytes_ += bytes;
  return open_[g];
}

RankSteps one_process_steps(const OffloadInput& in, int64_t cb) {
  // Registered unit by unit in forward order, per parameter its copy, master, gradient and
  // moments (OffloadStrategy's constructor).
  ChunkLists lists(cb);
  Chunks at(in.tensors.size());
  for (auto& a : at) a.fill(-1);
  const int64_t copy_size = dtype_size(in.compute);
  for (const OffloadUnit& u : in.units)
    for (size_t t : u.tensors) {
      const OffloadTensor& x = in.tensors[t];
      for (int g : {kCopy, kParam, kGrad, kMomentM, kMomentV}) {
        if (g == kCopy && !x.copy) continue;
        at[t][size_t(g)] =
            lists.add(g, x.numel * (g == kCopy ? copy_size : 4), x.name + kSuffixes[g]);
      }
    }
  RankSteps r;
  r.group_of = lists.group_of();
  r.state_bytes = lists.bytes();
  const bool copies = std::count(r.group_of.begin(), r.group_of.end(), int(kCopy)) > 0;
  std::vector<std::vector<int>> held;
  r.step = step_events(in, at, r.group_of, copies, &held);
  // The working set counts the f32 masters' units too, which an evaluation's forward holds.
  r.working_set = working_set(in, held);
  if (copies && in.pipeline.active()) {  // every unit's copies and gradients at once
    std::set<int> all;
    for (const std::vector<int>& h : held) all.insert(h.begin(), h.end());
    r.working_set = std::max(r.working_set, int(all.size()));
  }
  if (copies) {
    step_events(in, at, r.group_of, false, &held);
    r.working_set = std::max(r.working_set, working_set(in, held));
  }
  r.host_row = copies ? 5 : 4;
  // Start-up under mixed precision: every master rounded into its copy, the two chunks held in
  // the host tier in turn (OffloadStrategy::refresh_copies).
  int h[2] = {-1, -1};  // the master's chunk, the copy's
  const auto hold = [&](int& held_chunk, int id, bool write) {
    if (held_chunk == id) return;
    if (held_chunk >= 0) r.start.push_back({Event::Release, held_chunk, Tier::Host, false});
    r.start.push_back({Event::Access, id, Tier::Host, write});
    held_chunk = id;
  };
  for (size_t t = 0; t < in.tensors.size(); ++t) {
    if (at[t][kCopy] < 0) continue;
    hold(h[0], at[t][kParam], false);
    hold(h[1], at[t][kCopy], true);
  }
  for (int c : {h[1], h[0]})
    if (c >= 0) r.start.push_back({Event::Release, c, Tier::Host, false});
  return r;
}

}  // namespace tessel::plan::offload
