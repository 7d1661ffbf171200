// SPDX-License-Identifier: Apache-2.0
// ChunkManager's tier moves: bringing a chunk into a memory tier, making room by eviction down
// the tiers (device -> host -> NVMe), NVMe transfers and their completion, and conservative
// prefetching along the recorded trace.
#include <algorithm>
#include <chrono>

#include "tessel/core/error.h"
#include "tessel/memory/chunk_manager.h"

namespace tessel::memory {

void ChunkManager::move(int id, Tier tier) {
  check_sealed("move");
  Chunk& c = at(id);
  TESSEL_CHECK(c.state != ChunkState::Compute && c.state != ChunkState::Free, "chunk ", id,
               " cannot move while ", state_name(c.state));
  if (tier == Tier::Nvme) {
    TESSEL_CHECK(nvme_, "chunk ", id, " cannot move to NVMe: memory.nvme_dir is not set");
    finish_io(c);
    if (c.tier != Tier::Nvme) write_to_nvme(c);
  } else {
    bring_to(c, tier, false);
  }
  finish_io(c);
}

void ChunkManager::prefetch(int id, Tier tier) {
  check_sealed("prefetch");
  Chunk& c = at(id);
  if (c.state == ChunkState::Free || c.state == ChunkState::Compute) return;
  bring_to(c, tier, true);
}

void ChunkManager::wait_all() {
  for (auto& c : chunks_) finish_io(*c);
}

void ChunkManager::bring_to(Chunk& c, Tier tier, bool prefetching) {
  const size_t cb = config_.chunk_bytes;
  if (c.io == Chunk::Io::Reading && c.tier == tier) return;
  finish_io(c);
  if (c.tier == tier) return;
  // Making room may cascade down the tiers; the chunk being brought in must not be the one
  // that makes room in the tier it comes from.
  c.moving = true;
  try {
    make_room(tier, c.id);
  } catch (...) {
    c.moving = false;
    throw;
  }
  c.moving = false;
  if (c.tier != Tier::Nvme) return relabel(c, tier);
  void* p = pool_of(tier).allocate(cb);
  c.ticket = nvme_->read(c.nvme_slot, p);
  c.io = Chunk::Io::Reading;
  c.pending_buffer = p;
  c.prefetched = prefetching;
  ++stats_.nvme_reads;
  ++(prefetching ? stats_.prefetch_reads : stats_.demand_reads);
  stats_.bytes_read += cb;
  c.tier = tier;
}

void ChunkManager::relabel(Chunk& c, Tier tier) {
  // Both memory tiers are host memory here (the device tier of a CPU-only machine): the chunk's
  // block changes pools and no byte is copied. A device tier in accelerator memory copies here.
  BudgetedPool& from = pool_of(c.tier);
  BudgetedPool& to = pool_of(tier);
  TESSEL_CHECK(from.device() == to.device(), "chunk ", c.id, ": moving from the ",
               tier_name(c.tier), " tier to the ", tier_name(tier),
               " tier between different memories needs a copy");
  // Checked before the storage lets go of its block, so a refusal leaves the chunk where it was.
  TESSEL_CHECK(to.fits(config_.chunk_bytes), "chunk ", c.id, ": the ", tier_name(tier),
               " tier has no room for it (make_room first)");
  void* p = c.storage->data();
  c.storage->rebind(nullptr, from);  // hands the block back to `from`, which keeps it
  c.storage->rebind(to.adopt(from, p, config_.chunk_bytes), to);
  ++(tier == Tier::Device ? stats_.host_to_device : stats_.device_to_host);
  c.tier = tier;
}

void ChunkManager::make_room(Tier tier, int exclude) {
  BudgetedPool& pool = pool_of(tier);
  while (!pool.fits(config_.chunk_bytes)) {
    // A write already leaving this tier frees its bytes soonest: wait for it first.
    Chunk* writing = nullptr;
    Chunk* reading = nullptr;  // a prefetch landing here: evictable once it has landed
    std::vector<int> candidates;
    std::vector<uint8_t> clean;  // evicting it to NVMe writes nothing (write_to_nvme)
    for (auto& c : chunks_) {
      if (c->tier != tier || c->id == exclude || c->moving) continue;
      if (c->io == Chunk::Io::Writing && writing == nullptr) writing = c.get();
      if (c->io == Chunk::Io::Reading && reading == nullptr) reading = c.get();
      if (c->io == Chunk::Io::None && c->state != ChunkState::Compute &&
          c->state != ChunkState::Free && c->storage->is_materialized()) {
        candidates.push_back(c->id);
        clean.push_back(c->nvme_valid && c->nvme_slot >= 0);
      }
    }
    if (writing != nullptr) {
      finish_io(*writing);
      continue;
    }
    if (candidates.empty() && reading != nullptr) {
      finish_io(*reading);
      continue;
    }
    int victim = policy_.choose_victim(candidates, clean);
    if (victim < 0) fail_budget(tier, exclude);
    evict(at(victim));
  }
}

bool ChunkManager::can_make_room(Tier tier, int exclude) const {
  const BudgetedPool& p = pool(tier);
  if (p.budget() < config_.chunk_bytes) return false;
  if (p.fits(config_.chunk_bytes)) return true;
  for (const auto& c : chunks_) {
    if (c->tier != tier || c->id == exclude || c->moving) continue;
    if (c->io == Chunk::Io::Writing || c->io == Chunk::Io::Reading) return true;
    if (c->io == Chunk::Io::None && c->state != ChunkState::Compute &&
        c->storage->is_materialized()) {
      return true;
    }
  }
  return false;
}

void ChunkManager::evict(Chunk& c) {
  if (c.tier == Tier::Device && can_make_room(Tier::Host, c.id)) {
    make_room(Tier::Host, c.id);
    relabel(c, Tier::Host);
    return;
  }
  if (!nvme_) fail_budget(c.tier, -1);
  write_to_nvme(c);
}

void ChunkManager::write_to_nvme(Chunk& c) {
  ++stats_.nvme_evictions;
  if (c.nvme_valid && c.nvme_slot >= 0) {
    // Clean: the slot already holds these bytes (written at start-up or after the last
    // ReadWrite access, and only read since), so the memory copy is dropped, not written.
    c.storage->release();
    c.tier = Tier::Nvme;
    ++stats_.clean_evictions;
    return;
  }
  if (c.nvme_slot < 0) c.nvme_slot = take_nvme_slot(c.id);
  c.ticket = nvme_->write(c.nvme_slot, c.storage->data());
  c.io = Chunk::Io::Writing;
  ++c.nvme_writes;
  ++stats_.nvme_writes;
  stats_.bytes_written += config_.chunk_bytes;
}

void ChunkManager::finish_io(Chunk& c) {
  if (c.io == Chunk::Io::None) return;
  // Time blocked here counts into stats().io_wait_ms, also when the transfer failed.
  struct WaitTimer {
    double& total;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~WaitTimer() {
      total += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                   .count();
    }
  } timer{stats_.io_wait_ms};
  IoTicket ticket = std::move(c.ticket);
  Chunk::Io io = c.io;
  c.io = Chunk::Io::None;
  if (io == Chunk::Io::Reading) {
    void* p = c.pending_buffer;
    c.pending_buffer = nullptr;
    try {
      nvme_->wait(ticket);
    } catch (const Error&) {
      // The chunk stays on NVMe (its slot still holds the contents); the buffer goes back.
      pool_of(c.tier).deallocate(p, config_.chunk_bytes);
      c.tier = Tier::Nvme;
      throw;
    }
    c.storage->rebind(p, pool_of(c.tier));
  } else {
    nvme_->wait(ticket);  // on failure the bytes stay in memory, in their tier
    c.storage->release();
    c.tier = Tier::Nvme;
    c.nvme_valid = true;
  }
}

// Why n - M + 1 slots are enough for eviction, M the chunks the host budget holds (the device's
// when the host holds none): a chunk is evicted to NVMe only when its tier is full -- a host
// victim from a full host, a device victim when the host cannot make room, so is full too (with
// no host budget, from a full device) -- and make_room() has first waited for the writes leaving
// that tier. Once the reads in flight have landed (take_nvme_slot), every slot not reclaimable is
// a chunk on NVMe, k of them, and the M chunks of the full tier are others: k + M <= n, so the
// victim makes at most n - M + 1. Seal's n - device - host is fewer. Fewer slots than chunks cost
// writes, though: a slot taken back from a chunk in memory is a clean copy lost, so that chunk's
// next eviction writes it again (docs/MEMORY.md); memory.nvme_budget 0 reserves one per chunk.
void ChunkManager::check_nvme_budget(size_t n, size_t dev, size_t host, size_t nvme) const {
  if (!nvme_ || config_.nvme_budget == 0 || n == 0) return;
  const size_t full = std::min(n, host >= 1 ? host : dev);
  const size_t need = n - full + 1;
  TESSEL_CHECK(nvme >= need, "memory.nvme_budget of ", config_.nvme_budget, " bytes holds ", nvme,
               " chunks of ", config_.chunk_bytes, " bytes, but eviction can leave ", need,
               " of the ", n, " chunks on NVMe at once (all but the ", full,
               host >= 1 ? " the host tier holds" : " the device tier holds",
               ", and the one being evicted): the smallest NVMe budget that works is ",
               need * config_.chunk_bytes, " bytes");
}

bool ChunkManager::reclaim_nvme_slot(int exclude) {
  for (auto& c : chunks_) {
    if (c->id == exclude || c->nvme_slot < 0 || c->io != Chunk::Io::None) continue;
    if (c->tier != Tier::Device && c->tier != Tier::Host) continue;
    nvme_->free_slot(c->nvme_slot);
    c->nvme_slot = -1;
    c->nvme_valid = false;
    return true;
  }
  return false;
}

int64_t ChunkManager::take_nvme_slot(int exclude) {
  TESSEL_CHECK(nvme_, "no NVMe tier: memory.nvme_dir is not set");
  int64_t slot = nvme_->allocate_slot();
  if (slot >= 0) return slot;
  // Every slot is taken: take one back from a chunk in memory, whose NVMe copy is only a cache;
  // a chunk being read into memory becomes one once its read has landed.
  if (reclaim_nvme_slot(exclude)) return nvme_->allocate_slot();
  for (auto& c : chunks_)
    if (c->id != exclude && c->io == Chunk::Io::Reading) finish_io(*c);
  if (reclaim_nvme_slot(exclude)) return nvme_->allocate_slot();
  TESSEL_FAIL("NVMe tier in ", nvme_->dir(), ": all ", nvme_->slots(), " slots of ",
              config_.chunk_bytes, " bytes are in use (memory.nvme_budget ", config_.nvme_budget,
              ")");
}

void ChunkManager::fail_budget(Tier tier, int exclude) const {
  const size_t cb = config_.chunk_bytes;
  const BudgetedPool& p = pool(tier);
  size_t held = 0;
  for (const auto& c : chunks_) {
    if (c->tier == tier && c->state == ChunkState::Compute) ++held;
  }
  bool below = tier == Tier::Device ? host_.budget() >= cb || nvme_ : bool(nvme_);
  TESSEL_FAIL(
      tier_name(tier), " tier: no room for a chunk of ", cb, " bytes (chunk ", exclude,
      "): memory.", tier_name(tier), "_budget ", p.budget(), " bytes, ", p.bytes_in_use(),
      " in use, ", held, " chunks held for compute", below ? "" : " and no lower tier to evict to",
      "; the smallest budget that works for this working set is ", (held + 1) * cb, " bytes");
}

void ChunkManager::run_prefetch() {
  if (prefetch_distance_ == 0 || !policy_.has_trace()) return;
  const std::vector<int>& trace = policy_.trace();
  // Positions past the trace's end are the next step's (the trace repeats), so its first
  // reads start before the step ends; next_use() counts positions the same way.
  const size_t now = policy_.cursor();
  const size_t end = now + size_t(prefetch_distance_);
  for (size_t u = now; u < end; ++u) {
    Chunk& x = at(trace[u % trace.size()]);
    if (x.state == ChunkState::Free || x.tier == Tier::Device) continue;  // no read needed
    if (!trace_tiers_.empty() && trace_tiers_[u % trace.size()] == Tier::Host) {
      // An access in the host tier (the CPU optimizer's): read it ahead from NVMe into free
      // host memory; a chunk already in memory is copied at its access, and MIN's replacements
      // are the device tier's, so nothing is evicted for it.
      if (x.tier == Tier::Nvme && x.io == Chunk::Io::None && host_.fits(config_.chunk_bytes))
        bring_to(x, Tier::Host, true);
      continue;
    }
    if (x.io == Chunk::Io::Writing && !nvme_->done(x.ticket)) return;
    // Prefetch never blocks the caller on a write: a victim's write still in flight is
    // picked up at a later access or release, and the walk resumes from this miss.
    bool leaving = false;
    for (auto& c : chunks_) {
      if (c->tier != Tier::Device || c->io != Chunk::Io::Writing) continue;
      if (nvme_->done(c->ticket)) {
        finish_io(*c);
      } else {
        leaving = true;
      }
    }
    if (!device_.fits(config_.chunk_bytes) && leaving) return;
    if (!device_.fits(config_.chunk_bytes)) {
      // The chunk MIN evicts at the miss at u; it may go now only if nothing uses it before u,
      // so the replacements stay MIN's and so does the number of reads.
      // Ties (chunks used by neither step) go to a clean one, as in make_room.
      int victim = -1;
      size_t farthest = 0;
      const auto clean = [this](int id) { return at(id).nvme_valid && at(id).nvme_slot >= 0; };
      for (auto& c : chunks_) {
        if (c->tier != Tier::Device || c->id == x.id) continue;
        size_t next = policy_.next_use(c->id, u);
        if (victim < 0 || next > farthest || (next == farthest && clean(c->id) && !clean(victim))) {
          victim = c->id;
          farthest = next;
        }
      }
      if (victim < 0) return;
      Chunk& v = at(victim);
      if (v.state == ChunkState::Compute || v.io != Chunk::Io::None) return;
      if (policy_.next_use(victim, now) < u) return;
      evict(v);
      if (v.io == Chunk::Io::Writing) return;
    }
    bring_to(x, Tier::Device, true);
  }
}

}  // namespace tessel::memory
