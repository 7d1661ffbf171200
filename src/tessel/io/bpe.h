// SPDX-License-Identifier: Apache-2.0
// Byte-pair encoding merges (Sennrich et al. 2016, as used by GPT-2): a table from adjacent token
// pairs to (rank, merged token), and the merge loop over one pre-tokenized piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessel::io {

// Open-addressing hash table from a pair of token ids to the merge that joins them.
class BpeMerges {
 public:
  struct Merge {
    int32_t rank;    // position in the merge list: lower merges first
    int32_t merged;  // id of the joined token
  };

  // Adds or replaces the merge of (left, right); a pair listed twice keeps its last rank, as the
  // reference encoders' dictionaries do.
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged);
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static size_t hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key);
  }
  void grow();

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Applies merges to symbols in place, with the reference semantics (openai/gpt-2 encoder.py):
// repeatedly take the lowest-ranked adjacent pair and merge all of its occurrences left to right,
// until no adjacent pair has a merge. Short pieces use a linear scan per step, long ones a heap,
// so a megabyte-long word costs O(n log n), not O(n^2).
void bpe_merge(const BpeMerges& merges, std::vector<int32_t>& symbols);

// The two strategies, exposed so tests can check that they agree.
void bpe_merge_linear(const BpeMerges& merges, std::vector<int32_t>& symbols);
void bpe_merge_heap(const BpeMerges& merges, std::vector<int32_t>& symbols);

}  // namespace tessel::io
