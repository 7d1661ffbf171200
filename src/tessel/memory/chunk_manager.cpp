// SPDX-License-Identifier: Apache-2.0
// ChunkManager: layout, placement, the access/release state machine and the accounting check.
// The tier moves, eviction and prefetch are in chunk_mover.cpp.
#include "tessel/memory/chunk_manager.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "tessel/core/error.h"

namespace tessel::memory {

namespace {

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Tensors start at cache-line boundaries inside a chunk: every dtype's element size divides
// it (so the view's element offset is exact) and SIMD kernels see aligned rows.
constexpr size_t kTensorAlignment = 64;

}  // namespace

ChunkManager::ChunkManager(MemoryConfig config)
    : config_(std::move(config)),
      device_("device", config_.device_budget),
      host_("host", config_.host_budget) {
  TESSEL_CHECK(config_.chunk_bytes > 0, "memory.chunk_bytes must be > 0");
  config_.chunk_bytes = round_up(config_.chunk_bytes, kIoAlignment);
  if (!config_.nvme_dir.empty()) {
    nvme_ = std::make_unique<NvmeTier>(config_.nvme_dir, config_.chunk_bytes, config_.io_depth,
                                       config_.io_block_bytes);
  }
}

ChunkManager::~ChunkManager() {
  try {
    wait_all();
  } catch (const Error&) {
    // A failed transfer leaves that chunk's tensors released below; nothing to rethrow to.
  }
  if (nvme_) nvme_->wait_all();  // no transfer may still target a buffer freed below
  // Tensors may outlive the manager (a model kept after its trainer): the chunks in memory move
  // to plain host memory, each tier's block freed as soon as its copy is made, so tearing down
  // takes one chunk beyond the budgets, not a second copy of everything the tiers hold.
  for (auto& c : chunks_) {
    if (!c->storage) continue;
    Storage& s = *c->storage;
    if (c->io == Chunk::Io::None && s.is_materialized() && c->tier != Tier::Nvme) {
      void* p = cpu_allocator().allocate(s.nbytes());
      std::memcpy(p, s.data(), s.nbytes());
      s.rebind(p, cpu_allocator());
      pool_of(c->tier).trim();
    } else {
      if (c->pending_buffer != nullptr) pool_of(c->tier).deallocate(c->pending_buffer, s.nbytes());
      s.rebind(nullptr, cpu_allocator());
    }
  }
}

void ChunkManager::add(const Tensor& tensor, const std::string& group) {
  TESSEL_CHECK(!sealed_ && !laid_out_, "ChunkManager::add(", tensor.name(),
               "): the layout is sealed (or laid out)");
  size_t aligned = round_up(tensor.nbytes(), kTensorAlignment);
  TESSEL_CHECK(aligned <= config_.chunk_bytes, "tensor ", tensor.name(), " (", tensor.nbytes(),
               " bytes) does not fit a chunk of ", config_.chunk_bytes,
               " bytes: memory.chunk_bytes must be at least ", round_up(aligned, kIoAlignment));
  for (const auto& p : pending_) {
    TESSEL_CHECK(!p.tensor.is_same(tensor), "tensor ", tensor.name(), " is registered twice");
  }
  pending_.push_back({tensor, group});
}

void ChunkManager::lay_out() {
  TESSEL_CHECK(!sealed_, "ChunkManager::lay_out after seal()");
  if (laid_out_) return;
  laid_out_ = true;
  const size_t cb = config_.chunk_bytes;
  // One open chunk per group; a tensor that does not fit its group's open chunk opens the next
  // one, so chunk ids follow the order of first use across groups.
  std::vector<std::vector<const Pending*>>& members = members_;
  std::map<std::string, int> open;
  for (const Pending& p : pending_) {
    size_t need = round_up(p.tensor.nbytes(), kTensorAlignment);
    auto it = open.find(p.group);
    if (it == open.end() || chunks_[size_t(it->second)]->used_bytes + need > cb) {
      auto c = std::make_unique<Chunk>();
      c->id = int(chunks_.size());
      c->group = p.group;
      open[p.group] = c->id;
      chunks_.push_back(std::move(c));
      members.emplace_back();
      it = open.find(p.group);
    }
    Chunk& c = *chunks_[size_t(it->second)];
    c.tensors.push_back({p.tensor.name(), c.used_bytes, p.tensor.nbytes()});
    c.used_bytes += need;
    members[size_t(c.id)].push_back(&p);
    chunk_by_tensor_[p.tensor.impl_ptr().get()] = c.id;
  }
}

void ChunkManager::seal(const TensorFill& fill) {
  TESSEL_CHECK(!sealed_, "ChunkManager::seal called twice");
  lay_out();
  const size_t cb = config_.chunk_bytes;
  const std::vector<std::vector<const Pending*>>& members = members_;
  // Budgets, in whole chunks: the device tier must hold one, all tiers together every chunk.
  size_t n = chunks_.size();
  size_t dev = config_.device_budget / cb, host = config_.host_budget / cb;
  TESSEL_CHECK(dev >= 1 || n == 0, "memory.device_budget of ", config_.device_budget,
               " bytes holds no chunk of ", cb, " bytes: the smallest device budget that works is ",
               cb);
  size_t nvme = !nvme_ ? 0 : config_.nvme_budget == 0 ? n : config_.nvme_budget / cb;
  if (dev + host + nvme < n) {
    size_t short_by = (n - dev - host - nvme) * cb;
    TESSEL_FAIL("the ", n, " chunks of ", cb, " bytes (", n * cb,
                " bytes) do not fit the tiers: memory.device_budget ", config_.device_budget,
                " + memory.host_budget ", config_.host_budget, " + NVMe ", nvme * cb, " hold ",
                dev + host + nvme, " chunks; the smallest host budget that works is ",
                config_.host_budget / cb * cb + short_by,
                nvme_ ? " (or raise memory.nvme_budget)" : " (or set memory.nvme_dir)");
  }
  check_nvme_budget(n, dev, host, nvme);
  if (nvme_) nvme_->reserve(std::min(nvme, n));
  policy_.resize(int(n));
  // Chunks bound for NVMe are filled in two staging buffers in turn: one is written while the
  // next chunk is filled in the other.
  struct Staging {
    void* buffer = nullptr;
    IoTicket write;
  };
  Staging staging[2];
  const auto drain = [this, &staging] {
    for (Staging& s : staging)
      if (s.write) {
        IoTicket t = std::move(s.write);
        s.write = nullptr;
        nvme_->wait(t);
      }
  };
  const auto free_staging = [&staging] {
    for (Staging& s : staging) std::free(s.buffer);
  };
  try {
    size_t turn = 0;
    for (auto& c : chunks_) {
      Staging* s = nullptr;
      if (!device_.fits(cb) && !host_.fits(cb)) {
        s = &staging[turn++ % 2];
        if (s->write) {
          IoTicket t = std::move(s->write);
          s->write = nullptr;
          nvme_->wait(t);
        }
        if (s->buffer == nullptr) {
          s->buffer = std::aligned_alloc(kIoAlignment, cb);
          TESSEL_CHECK(s->buffer != nullptr, "out of host memory for a staging chunk of ", cb,
                       " bytes");
        }
      }
      IoTicket write = fill_and_place(*c, members[size_t(c->id)], s ? s->buffer : nullptr, fill);
      if (s) s->write = std::move(write);
    }
    drain();
  } catch (...) {
    try {
      if (nvme_) nvme_->wait_all();  // no write may still read a buffer freed below
    } catch (...) {
    }
    free_staging();
    throw;
  }
  free_staging();
  members_.clear();
  pending_.clear();
  chunk_by_tensor_.clear();
  sealed_ = true;
}

IoTicket ChunkManager::fill_and_place(Chunk& c, const std::vector<const Pending*>& members,
                                      void* staging, const TensorFill& fill) {
  const size_t cb = config_.chunk_bytes;
  Tier tier = device_.fits(cb) ? Tier::Device : host_.fits(cb) ? Tier::Host : Tier::Nvme;
  c.storage = std::make_shared<Storage>(cb, tier == Tier::Nvme ? cpu_allocator() : pool_of(tier));
  char* buf = static_cast<char*>(tier == Tier::Nvme ? staging : c.storage->data());
  std::memset(buf, 0, cb);  // padding is zero, so a chunk's bytes are a function of its tensors
  for (size_t i = 0; i < members.size(); ++i) {
    const Tensor& t = members[i]->tensor;
    char* dst = buf + c.tensors[i].byte_offset;
    if (fill) {
      fill(t, dst);
    } else if (t.storage().is_materialized()) {
      std::memcpy(dst, t.data_ptr(), t.nbytes());
    }
  }
  c.tier = tier;
  IoTicket write;
  if (tier == Tier::Nvme) {
    c.nvme_slot = take_nvme_slot(-1);
    write = nvme_->write(c.nvme_slot, buf);  // seal() waits for it before it returns
    c.nvme_valid = true;
    c.storage->rebind(nullptr, host_);
    ++c.nvme_writes;
    ++stats_.nvme_writes;
    stats_.bytes_written += cb;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    TensorImpl& impl = *members[i]->tensor.impl_ptr();
    impl.storage = c.storage;
    impl.offset = int64_t(c.tensors[i].byte_offset / dtype_size(impl.dtype));
  }
  chunk_by_storage_[c.storage.get()] = c.id;
  c.state = ChunkState::Hold;
  return write;
}

void ChunkManager::check_sealed(const char* what) const {
  TESSEL_CHECK(sealed_, "ChunkManager::", what, " before seal()");
}

Chunk& ChunkManager::at(int id) {
  TESSEL_CHECK(id >= 0 && size_t(id) < chunks_.size(), "chunk ", id, " does not exist (",
               chunks_.size(), " chunks)");
  return *chunks_[size_t(id)];
}

BudgetedPool& ChunkManager::pool_of(Tier tier) {
  TESSEL_CHECK(tier == Tier::Device || tier == Tier::Host, "tier ", tier_name(tier),
               " is not a memory tier");
  return tier == Tier::Device ? device_ : host_;
}

const BudgetedPool& ChunkManager::pool(Tier tier) const {
  return const_cast<ChunkManager*>(this)->pool_of(tier);
}

int ChunkManager::chunk_of(const Tensor& tensor) const {
  if (!sealed_) {
    auto laid = chunk_by_tensor_.find(tensor.impl_ptr().get());
    TESSEL_CHECK(laid != chunk_by_tensor_.end(), "tensor ", tensor.name(),
                 " is not in a chunk of this manager (add it, then lay out or seal)");
    return laid->second;
  }
  auto it = chunk_by_storage_.find(tensor.storage_ptr().get());
  TESSEL_CHECK(it != chunk_by_storage_.end(), "tensor ", tensor.name(),
               " is not in a chunk of this manager (add it, then seal)");
  return it->second;
}

void ChunkManager::access(int id, AccessMode mode, Tier tier) {
  check_sealed("access");
  Chunk& c = at(id);
  TESSEL_CHECK(tier == Tier::Device || tier == Tier::Host, "chunk ", id,
               ": compute happens in a memory tier, not ", tier_name(tier));
  if (policy_.recording()) trace_tiers_.push_back(tier);
  policy_.on_access(id);
  check_transition(id, c.state, ChunkState::Compute);
  if (c.state == ChunkState::Compute) {
    TESSEL_CHECK(c.tier == tier, "chunk ", id, " is held for compute in the ", tier_name(c.tier),
                 " tier, accessed again in the ", tier_name(tier), " tier");
  } else if (c.state == ChunkState::Free) {
    make_room(tier, id);
    void* p = pool_of(tier).allocate(config_.chunk_bytes);
    std::memset(p, 0, config_.chunk_bytes);
    c.storage->rebind(p, pool_of(tier));
    c.tier = tier;
  } else {
    if (c.io != Chunk::Io::None && !nvme_->done(c.ticket)) ++stats_.io_waits;
    bring_to(c, tier, false);
    finish_io(c);
  }
  if (mode == AccessMode::ReadWrite) c.nvme_valid = false;
  if (c.compute_refs == 0 && tier == Tier::Device) max_held_ = std::max(max_held_, ++held_);
  c.prefetched = false;
  c.state = ChunkState::Compute;
  ++c.compute_refs;
  run_prefetch();
}

void ChunkManager::release(int id, ChunkState after) {
  check_sealed("release");
  Chunk& c = at(id);
  TESSEL_CHECK(c.state == ChunkState::Compute && c.compute_refs > 0, "chunk ", id,
               " released while ", state_name(c.state), " (not held for compute)");
  check_transition(id, c.state, after);
  if (--c.compute_refs == 0) {
    c.state = after;
    if (c.tier == Tier::Device) --held_;
  }
  run_prefetch();
}

void ChunkManager::free(int id) {
  check_sealed("free");
  Chunk& c = at(id);
  check_transition(id, c.state, ChunkState::Free);
  finish_io(c);
  if (c.storage->is_materialized()) c.storage->release();
  if (c.nvme_slot >= 0) nvme_->free_slot(c.nvme_slot);
  c.nvme_slot = -1;
  c.nvme_valid = false;
  c.tier = Tier::None;
  c.state = ChunkState::Free;
}

void ChunkManager::start_trace() {
  policy_.start_recording();
  trace_tiers_.clear();
  max_held_ = held_;
}

AccessTrace ChunkManager::stop_trace() {
  return {policy_.stop_recording(), std::move(trace_tiers_), max_held_};
}

void ChunkManager::use_trace(AccessTrace trace, int prefetch_distance) {
  check_sealed("use_trace");
  TESSEL_CHECK(prefetch_distance >= 0, "prefetch distance ", prefetch_distance, " < 0");
  const size_t cb = config_.chunk_bytes;
  TESSEL_CHECK(size_t(trace.max_held) <= device_.budget() / cb, "memory.device_budget of ",
               device_.budget(), " bytes holds ", device_.budget() / cb, " chunks of ", cb,
               " bytes, but the traced step holds ", trace.max_held,
               " chunks for compute at once: the smallest device budget that works is ",
               size_t(trace.max_held) * cb, " bytes");
  TESSEL_CHECK(trace.tiers.empty() || trace.tiers.size() == trace.accesses.size(), "a trace of ",
               trace.accesses.size(), " accesses carries ", trace.tiers.size(), " tiers");
  trace_tiers_ = std::move(trace.tiers);
  policy_.use_trace(std::move(trace.accesses));
  prefetch_distance_ = prefetch_distance;
  run_prefetch();  // the step's first reads start now, not at its first access
}

void ChunkManager::begin_unscheduled() {
  check_sealed("begin_unscheduled");
  TESSEL_CHECK(!unscheduled_, "ChunkManager::begin_unscheduled: already unscheduled");
  unscheduled_ = true;
  scheduled_at_ = policy_.position();
  scheduled_prefetch_ = prefetch_distance_;
  prefetch_distance_ = 0;
}

void ChunkManager::end_unscheduled() {
  if (!unscheduled_) return;
  unscheduled_ = false;
  policy_.set_position(scheduled_at_);
  prefetch_distance_ = scheduled_prefetch_;
  run_prefetch();
}

int ChunkManager::prefetched_unused() const {
  int n = 0;
  for (const auto& c : chunks_) n += c->prefetched;
  return n;
}

size_t ChunkManager::nvme_bytes_in_use() const {
  return nvme_ ? nvme_->slots_in_use() * config_.chunk_bytes : 0;
}

void ChunkManager::check_accounting() const {
  const size_t cb = config_.chunk_bytes;
  for (Tier tier : {Tier::Device, Tier::Host}) {
    const BudgetedPool& p = pool(tier);
    size_t held = 0;
    for (const auto& c : chunks_) {
      bool here = c->tier == tier && (c->storage->is_materialized() || c->io == Chunk::Io::Reading);
      if (here) held += cb;
      TESSEL_CHECK(c->state != ChunkState::Compute ||
                       (c->tier != Tier::Nvme && c->storage->is_materialized()),
                   "chunk ", c->id, " is held for compute without its bytes in memory");
    }
    TESSEL_CHECK(held == p.bytes_in_use() && p.bytes_held() <= p.budget(), tier_name(tier),
                 " tier: ", p.bytes_in_use(), " bytes in use (", p.bytes_held(),
                 " with freed blocks kept), chunks hold ", held, ", budget ", p.budget());
  }
  size_t on_nvme = 0;
  for (const auto& c : chunks_) {
    if (c->tier != Tier::Nvme) continue;
    ++on_nvme;
    TESSEL_CHECK(c->nvme_slot >= 0 && c->nvme_valid && !c->storage->is_materialized(), "chunk ",
                 c->id, " is on NVMe without a valid slot");
  }
  TESSEL_CHECK(
      !nvme_ || (on_nvme <= nvme_->slots_in_use() && nvme_->slots_in_use() <= nvme_->slots()),
      "NVMe tier: ", on_nvme, " chunks on NVMe, ", nvme_ ? nvme_->slots_in_use() : 0,
      " slots in use");
}

}  // namespace tessel::memory
