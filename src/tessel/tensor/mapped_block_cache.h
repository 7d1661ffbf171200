// SPDX-License-Identifier: Apache-2.0
// Large host blocks as anonymous mappings of their own, kept after a free for the next request of
// about the same size (the caching idea of PyTorch's CUDA allocator and of jemalloc's extents,
// applied to the host). Why not glibc's heap: a heap is one contiguous range, so a large block
// freed between long-lived ones (ZeRO-3's gathered units, a gradient bucket, between the
// activations) leaves a hole that the next small request splits, and the next large one extends
// the heap instead: the heap, which glibc is told not to trim (tensor/allocator.cpp), grew to 1.5x
// what was ever in use at once. Why not plain mmap per block: every step would page-fault its
// temporaries in again (~70k faults per GPT-2 124M step) and unmap them (28 ms per zero_grad).
//
// The bound: the bytes mapped (in use + cached) never exceed the most ever in use at once
// (page-rounded) plus 1/8 of it, room for a phase's blocks to wait for the next phase. A request
// no cached block fits (within 1/16 of its size) reuses the cached block closest in size when a
// new mapping would pass that bound: mremap shrinks it (the tail goes back to the system) or grows
// it (only the new pages fault in), keeping its resident pages. Without the 1/8, one-process
// GPT-2 steps page-faulted ~22k times each; with it, ~150 (BENCHMARKS.md).
//
// Following the cycle: the 1/8 suffices when long-lived state is part of the most ever in use, as
// in an in-memory training run. When a memory layer keeps that state elsewhere (memory offload's
// tiers) the mark is the step's cycling blocks alone, and the same step can need more than 1/8 of
// spare, so every step gave back a block and remapped another (~200 MiB of page faults per GPT-2
// tiny step). While follow_cycles() is on, a request for the size of a block the bound made the
// cache give back (unmapped, or remapped to another size) is evidence of such a cycle: the spare
// grows by what that request would pass the bound by, up to 1/2 of the mark, so it settles at
// what the cycle needs (a victim-cache idea: the sizes given back are remembered, not their pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tessel {

class MappedBlockCache {
 public:
  MappedBlockCache();
  ~MappedBlockCache();
  MappedBlockCache(const MappedBlockCache&) = delete;
  MappedBlockCache& operator=(const MappedBlockCache&) = delete;

  void* take(size_t nbytes);  // page-aligned; throws Error when the system refuses the mapping
  void give(void* ptr);       // a block take() returned; cached, not unmapped
  void release_cached();      // unmaps every cached block

  size_t cached_bytes() const;  // mapped, free
  size_t mapped_bytes() const;  // mapped in all: in use + cached
  int64_t maps() const;         // new mappings and remaps so far (each may fault pages in)
  size_t spare_bytes() const;   // what may be mapped beyond the most ever in use, now

  // On while a memory layer holds long-lived state outside this cache (calls nest: each on needs
  // an off); the spare grown stays until every caller is off.
  void follow_cycles(bool on);

 private:
  struct Block {
    void* ptr;
    size_t bytes;
    uint64_t freed;  // order of the free, for least-recently-freed reuse
  };
  void* map(size_t bytes);
  void unmap(const Block& b);
  void set_limit();
  void gave_back(size_t bytes);  // remembered while following cycles
  // Following cycles: whether `need` is the size of a block given back, which is then forgotten.
  bool given_back_before(size_t need);

  mutable std::mutex mu_;
  size_t page_ = 4096;
  std::vector<Block> cached_;
  std::unordered_map<void*, size_t> live_;  // block -> mapped bytes
  size_t live_bytes_ = 0, cached_bytes_ = 0, high_ = 0, limit_ = 0;
  int following_ = 0;
  size_t grown_ = 0;                // spare added beyond 1/8 while following cycles
  std::vector<size_t> given_back_;  // sizes of the blocks the bound gave back, the latest last
  uint64_t frees_ = 0;
  int64_t maps_ = 0;
};

}  // namespace tessel
