// SPDX-License-Identifier: Apache-2.0
// The BPE merge loop. Both strategies reproduce the reference semantics exactly, including for
// merge lists whose ranks are not consistent with training order: a step merges every occurrence
// of the lowest-ranked pair present at the start of the step, left to right, before any pair
// that the step itself creates is considered.
#include "tessel/io/bpe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <queue>

namespace tessel::io {

void BpeMerges::add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.merge = {rank, merged};
      return;
    }
    if (s.key == kEmpty) {
      s = {key, {rank, merged}};
      ++size_;
      return;
    }
  }
}

void BpeMerges::grow() {
  std::vector<Slot> old = std::move(slots_);
  const size_t capacity = std::max<size_t>(16, old.size() * 2);
  slots_.assign(capacity, Slot{kEmpty, {0, 0}});
  mask_ = capacity - 1;
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) {
      add(int32_t(uint32_t(s.key >> 32)), int32_t(uint32_t(s.key)), s.merge.rank, s.merge.merged);
    }
  }
}

namespace {

constexpr size_t kLinearMax = 64;  // longer pieces take the heap path

}  // namespace

void bpe_merge_linear(const BpeMerges& merges, std::vector<int32_t>& symbols) {
  size_t n = symbols.size();
  if (n < 2) return;
  // pair[i]: the merge of (s[i], s[i+1]), or null. Each pair has one rank, so within a step the
  // pair being merged is recognised by its Merge pointer alone.
  std::vector<const BpeMerges::Merge*> pair(n - 1);
  int32_t* s = symbols.data();
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = merges.find(s[i], s[i + 1]);
  while (n > 1) {
    const BpeMerges::Merge* best = nullptr;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (pair[i] && (!best || pair[i]->rank < best->rank)) best = pair[i];
    }
    if (!best) break;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (pair[i] != best) continue;
      s[i] = best->merged;
      std::memmove(s + i + 1, s + i + 2, (n - i - 2) * sizeof(int32_t));
      for (size_t k = i + 1; k + 2 < n; ++k) pair[k] = pair[k + 1];
      --n;
      // The pairs touching the new symbol changed; neither can be `best` again in this step,
      // because a merged token differs from both of its parts.
      if (i > 0) pair[i - 1] = merges.find(s[i - 1], s[i]);
      if (i + 1 < n) pair[i] = merges.find(s[i], s[i + 1]);
    }
  }
  symbols.resize(n);
}

void bpe_merge_heap(const BpeMerges& merges, std::vector<int32_t>& symbols) {
  const size_t n = symbols.size();
  if (n < 2) return;
  struct Entry {
    int32_t rank;
    int32_t pos;  // left symbol; positions keep their order, so pos orders occurrences
    int32_t left, right;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> id(symbols), prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push_pair = [&](int32_t p, std::vector<Entry>& into) {
    if (p < 0 || next[p] < 0) return;
    if (const auto* m = merges.find(id[p], id[next[p]]))
      into.push_back({m->rank, p, id[p], id[next[p]]});
  };
  {
    std::vector<Entry> initial;
    for (size_t i = 0; i + 1 < n; ++i) push_pair(int32_t(i), initial);
    heap = decltype(heap)(std::greater<Entry>(), std::move(initial));
  }
  std::vector<Entry> step, created;
  while (!heap.empty()) {
    // One step: every queued occurrence of the lowest rank, in position order. Entries may be
    // stale (a symbol was merged away since); they are recognised by the ids they recorded.
    const int32_t rank = heap.top().rank;
    step.clear();
    while (!heap.empty() && heap.top().rank == rank) {
      step.push_back(heap.top());
      heap.pop();
    }
    created.clear();
    for (const Entry& e : step) {
      const int32_t p = e.pos;
      if (!alive[p] || id[p] != e.left) continue;
      const int32_t q = next[p];
      if (q < 0 || id[q] != e.right) continue;
      id[p] = merges.find(e.left, e.right)->merged;
      alive[q] = 0;
      next[p] = next[q];
      if (next[q] >= 0) prev[next[q]] = p;
      push_pair(prev[p], created);
      push_pair(p, created);
    }
    // Pairs made by this step wait for the next one, even if they rank lower.
    for (const Entry& e : created) heap.push(e);
  }
  symbols.clear();
  for (int32_t p = 0; p >= 0; p = next[p]) symbols.push_back(id[p]);
}

void bpe_merge(const BpeMerges& merges, std::vector<int32_t>& symbols) {
  if (symbols.size() <= kLinearMax) {
    bpe_merge_linear(merges, symbols);
  } else {
    bpe_merge_heap(merges, symbols);
  }
}

}  // namespace tessel::io
