// SPDX-License-Identifier: Apache-2.0
// ChunkManager: lays registered tensors (parameters, their 16-bit copies, gradients, optimizer
// states) out in fixed-size chunks in the order the step first uses them, one chunk list per
// kind of tensor (PatrickStar, Fang et al. 2021), and moves chunks between the device, host and
// NVMe tiers under byte budgets (ZeRO-Infinity's tiers). Each tensor becomes a view into its
// chunk's Storage, so Tensor handles stay valid while the bytes move. Eviction follows
// AccessPolicy (LRU, or Belady's MIN with a recorded trace); with a trace, reads are issued
// ahead of use by conservative prefetching (Cao et al. 1995: the same replacements as MIN, only
// earlier), so the number of NVMe reads stays MIN's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/memory/access_policy.h"
#include "tessel/memory/budgeted_pool.h"
#include "tessel/memory/chunk.h"
#include "tessel/memory/memory_config.h"
#include "tessel/memory/nvme_tier.h"
#include "tessel/tensor/tensor.h"

namespace tessel::memory {

enum class AccessMode : uint8_t { Read, ReadWrite };

// One recorded step: every chunk access in order, the memory tier each one wanted (prefetch
// brings a chunk to that tier), and the most chunks held for compute in the device tier at once.
struct AccessTrace {
  std::vector<int> accesses;
  std::vector<Tier> tiers;  // per access; empty: every access is the device tier's
  int max_held = 0;
};

struct MemoryStats {
  int64_t nvme_reads = 0;       // chunk reads from NVMe (demand + prefetch)
  int64_t demand_reads = 0;     // reads issued by the access that needed them
  int64_t prefetch_reads = 0;   // reads issued ahead of use
  int64_t nvme_writes = 0;      // chunk writes to NVMe
  int64_t nvme_evictions = 0;   // chunks sent from memory to NVMe: written, or dropped if clean
  int64_t clean_evictions = 0;  // evictions to NVMe that wrote nothing: the slot held the bytes
  int64_t io_waits = 0;         // accesses that found their chunk's I/O still in flight
  // Milliseconds the caller's thread spent blocked on NVMe transfers (a read an access needs, a
  // write whose space it needs): the part of a step the disk did not overlap with compute.
  double io_wait_ms = 0;
  int64_t host_to_device = 0;  // chunk copies between the memory tiers
  int64_t device_to_host = 0;
  size_t bytes_read = 0;
  size_t bytes_written = 0;
};

class ChunkManager {
 public:
  // Opens the tiers; with memory.nvme_dir set, probes the directory (one clear error when it
  // is missing, not writable or refuses writes).
  explicit ChunkManager(MemoryConfig config);
  // Tensors outlive the manager: chunks still in memory are copied to plain host memory, the
  // tensors of chunks on NVMe are left released.
  ~ChunkManager();
  ChunkManager(const ChunkManager&) = delete;
  ChunkManager& operator=(const ChunkManager&) = delete;

  // Writes a registered tensor's first contents straight into its place in a chunk (`dst`,
  // tensor.nbytes() bytes, zeroed): how a run too large for the machine's memory starts, each
  // value computed where it lives instead of in a plain copy first.
  using TensorFill = std::function<void(const Tensor& tensor, void* dst)>;

  // Registers a contiguous tensor in the next free place of its group's open chunk, in call
  // order (call in the order of first use). It becomes a view into the chunk at seal(); views
  // taken from it before then keep the old storage. A tensor without bytes (a released storage:
  // only its shape) starts as zeros, or as seal()'s fill writes it.
  void add(const Tensor& tensor, const std::string& group);
  // Lays out the chunks without placing them (num_chunks() and chunk(i) describe them; no
  // tensor moves yet); seal() does it when nobody did. No add() after it.
  void lay_out();
  // Lays out the chunks, checks that the budgets can hold them (naming the smallest budget
  // that would work otherwise), reserves the NVMe space, fills every chunk and places it
  // (device first, then host, then NVMe), one chunk after another: each chunk is filled in its
  // tier's memory, or in one of two staging buffers whose write to NVMe overlaps the next fill,
  // so sealing holds at most the budgets and two chunks besides the registered tensors. `fill`
  // writes each tensor's contents; without it a tensor's own bytes are copied (zeros for one
  // without bytes).
  void seal(const TensorFill& fill = {});

  // Makes the chunk's bytes valid in `tier` (a memory tier) and holds it there for compute.
  // Nested accesses count; Read keeps a clean NVMe copy valid, so evicting it writes nothing.
  void access(int chunk, AccessMode mode = AccessMode::ReadWrite, Tier tier = Tier::Device);
  // Ends one access; the last one moves the chunk to `after` (Hold, HoldAfterForward or
  // HoldAfterBackward).
  void release(int chunk, ChunkState after = ChunkState::Hold);
  // Drops the contents (gradients after the update): no bytes anywhere until the next access,
  // which starts from zeros.
  void free(int chunk);
  void access(const Tensor& tensor, AccessMode mode = AccessMode::ReadWrite) {
    access(chunk_of(tensor), mode);
  }
  void release(const Tensor& tensor, ChunkState after = ChunkState::Hold) {
    release(chunk_of(tensor), after);
  }
  // Moves a chunk that is not held for compute to `tier` now (waits for the transfer).
  void move(int chunk, Tier tier);
  // Starts bringing the chunk into `tier` without waiting (an NVMe read stays in flight).
  void prefetch(int chunk, Tier tier = Tier::Device);
  void wait_all();  // completes every transfer in flight

  // Policy: record one step's accesses, then use them (Belady eviction, prefetch `distance`
  // accesses ahead; 0 disables prefetch).
  // The trace also records the most chunks held for compute at once: the step's working set,
  // which use_trace() checks against the device budget before any step runs with it.
  void start_trace();
  AccessTrace stop_trace();
  void use_trace(AccessTrace trace, int prefetch_distance);

  // Accesses between these two are outside the traced step (a checkpoint's): they leave the
  // policy's position in the trace where it was and issue no prefetch; end_unscheduled() puts
  // the schedule back and resumes prefetching from where the step is.
  void begin_unscheduled();
  void end_unscheduled();

  // The chunk a registered tensor (or a view of it, once sealed) is in; from lay_out() on.
  int chunk_of(const Tensor& tensor) const;
  int num_chunks() const { return int(chunks_.size()); }
  const Chunk& chunk(int id) const { return *chunks_.at(size_t(id)); }
  size_t chunk_bytes() const { return config_.chunk_bytes; }
  const std::string& nvme_dir() const { return config_.nvme_dir; }
  const BudgetedPool& pool(Tier tier) const;
  size_t nvme_bytes_in_use() const;
  // The NVMe tier's swap file as reserved at seal(): 0 without one.
  size_t nvme_file_bytes() const { return nvme_ ? nvme_->file_bytes() : 0; }
  const MemoryStats& stats() const { return stats_; }
  // Chunks read ahead and not accessed yet (at the end of a step: the next step's first reads).
  int prefetched_unused() const;
  void reset_stats() { stats_ = {}; }
  bool direct_io() const { return nvme_ && nvme_->direct(); }
  std::string direct_io_fallback() const { return nvme_ ? nvme_->fallback_reason() : ""; }
  // Throws unless every pool's bytes in use equal the chunks it holds and stay within budget.
  void check_accounting() const;

 private:
  struct Pending {
    Tensor tensor;
    std::string group;
  };
  BudgetedPool& pool_of(Tier tier);
  Chunk& at(int id);
  void check_sealed(const char* what) const;
  // Fills the chunk and places it; one bound for NVMe is filled in `staging` and its write
  // started (the returned ticket; invalid otherwise).
  IoTicket fill_and_place(Chunk& chunk, const std::vector<const Pending*>& members, void* staging,
                          const TensorFill& fill);
  // Tier moves (chunk_mover.cpp).
  void bring_to(Chunk& chunk, Tier tier, bool prefetching);
  void make_room(Tier tier, int exclude);
  // Whether make_room(tier) can succeed without touching a chunk on its way between tiers
  // (when it cannot, a device victim skips the host and goes to NVMe).
  bool can_make_room(Tier tier, int exclude) const;
  void evict(Chunk& chunk);
  // Moves a chunk between the memory tiers by handing its block from one pool to the other, and
  // counts the move.
  void relabel(Chunk& chunk, Tier tier);
  void write_to_nvme(Chunk& chunk);
  void finish_io(Chunk& chunk);
  int64_t take_nvme_slot(int exclude);
  bool reclaim_nvme_slot(int exclude);  // frees the slot of a chunk in memory (a cache only)
  // memory.nvme_budget must hold the most chunks eviction can leave on NVMe at once (see
  // chunk_mover.cpp), or a step could find every slot taken: refused at seal() otherwise.
  void check_nvme_budget(size_t chunks, size_t device, size_t host, size_t nvme) const;
  void run_prefetch();
  [[noreturn]] void fail_budget(Tier tier, int exclude) const;

  MemoryConfig config_;
  BudgetedPool device_;
  BudgetedPool host_;
  std::unique_ptr<NvmeTier> nvme_;
  std::vector<Pending> pending_;
  std::vector<std::vector<const Pending*>> members_;  // per chunk, from lay_out() to seal()
  bool laid_out_ = false;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::unordered_map<const Storage*, int> chunk_by_storage_;
  std::unordered_map<const TensorImpl*, int> chunk_by_tensor_;  // from lay_out() to seal()
  bool sealed_ = false;
  AccessPolicy policy_;
  int prefetch_distance_ = 0;
  bool unscheduled_ = false;
  AccessPolicy::Position scheduled_at_;  // while unscheduled: the position to go back to
  int scheduled_prefetch_ = 0;           // and the prefetch distance
  int held_ = 0;                         // chunks in Compute in the device tier now
  int max_held_ = 0;                     // the most since start_trace()
  std::vector<Tier> trace_tiers_;  // the tier of each access of the trace in use (or recording)
  MemoryStats stats_;
};

}  // namespace tessel::memory
