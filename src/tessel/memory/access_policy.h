// SPDX-License-Identifier: Apache-2.0
// AccessPolicy: which chunk to evict. Without a trace, the least recently used one. With the
// chunk access sequence of one recorded step (training repeats the same sequence every step),
// the one whose next use is farthest away: Belady's MIN (1966), optimal in the number of reads
// when the future is known, as Harmony and PatrickStar's runtime tracer exploit. The trace is
// treated as cyclic, so near the end of a step the next step's first uses count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tessel::memory {

class AccessPolicy {
 public:
  static constexpr size_t kNever = SIZE_MAX;

  void resize(int num_chunks);
  // Every access, in order; advances the position in the trace (resynchronising by searching
  // ahead when the step diverged from the trace; lost, it falls back to LRU until the trace's
  // first access comes round again).
  void on_access(int chunk);

  void start_recording();
  std::vector<int> stop_recording();
  bool recording() const { return recording_; }
  // Uses `trace` for Belady eviction from now on, positioned at its start. Empty: LRU.
  void use_trace(std::vector<int> trace);
  bool has_trace() const { return !trace_.empty() && in_sync_; }
  const std::vector<int>& trace() const { return trace_; }
  size_t cursor() const { return cursor_; }  // position of the next expected access
  // Where the step is in the trace: kept across accesses outside the traced step (a
  // checkpoint's), which would otherwise move or lose it.
  struct Position {
    size_t cursor = 0;
    bool in_sync = true;
  };
  Position position() const { return {cursor_, in_sync_}; }
  void set_position(Position p) {
    cursor_ = p.cursor;
    in_sync_ = p.in_sync;
  }

  // The first position >= `from` at which `chunk` is accessed, counting positions of the next
  // step (+ trace size) when it is not accessed again in this one; kNever if never.
  size_t next_use(int chunk, size_t from) const;
  // The candidate to evict: farthest next use with a trace, least recently used without.
  // Ties go first to a clean candidate (`clean[i]` for candidates[i]: its NVMe copy is current,
  // so evicting it writes nothing; empty: none is), then to the lowest id. -1 for no candidates.
  int choose_victim(std::span<const int> candidates, std::span<const uint8_t> clean = {}) const;

 private:
  std::vector<int> trace_;
  std::vector<std::vector<size_t>> positions_;  // per chunk, ascending positions in trace_
  size_t cursor_ = 0;
  bool in_sync_ = true;
  bool recording_ = false;
  std::vector<int> recorded_;
  std::vector<uint64_t> last_use_;  // per chunk, the tick of its last access
  uint64_t tick_ = 0;
};

}  // namespace tessel::memory
