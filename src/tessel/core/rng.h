// SPDX-License-Identifier: Apache-2.0
// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011). Element i of a draw depends only on (seed, offset + i), never on which
// thread produced it, so results are identical for any thread count and can be replayed
// (dropout under activation recomputation replays its offset).
#pragma once

#include <array>
#include <cstdint>

namespace tessel {

// Four 32-bit random words for one 128-bit counter under a 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

// Stateless draws: element `index` of the stream named by (seed, offset).
float uniform_at(uint64_t seed, uint64_t offset, uint64_t index);  // in [0, 1)
float normal_at(uint64_t seed, uint64_t offset, uint64_t index);   // N(0, 1), Box-Muller

// A seed plus a running offset. Each draw of n numbers reserves offsets [offset, offset + n),
// so consecutive draws never overlap and saving (seed, offset) captures the whole state.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n numbers and returns the offset of the first.
  uint64_t reserve(uint64_t n) {
    uint64_t start = offset_;
    offset_ += n;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator (seeded with 0 unless set). Not thread-safe by design:
// draws happen on the thread that builds the model or runs the step.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace tessel
