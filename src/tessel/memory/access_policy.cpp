// SPDX-License-Identifier: Apache-2.0
#include "tessel/memory/access_policy.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel::memory {

namespace {
// How far ahead on_access looks for an access that is not the expected one before it declares
// the step out of sync with the trace.
constexpr size_t kResyncWindow = 64;
}  // namespace

void AccessPolicy::resize(int num_chunks) {
  last_use_.assign(size_t(num_chunks), 0);
  positions_.assign(size_t(num_chunks), {});
}

void AccessPolicy::on_access(int chunk) {
  TESSEL_CHECK(chunk >= 0 && size_t(chunk) < last_use_.size(), "access of chunk ", chunk, " of ",
               last_use_.size());
  last_use_[size_t(chunk)] = ++tick_;
  if (recording_) recorded_.push_back(chunk);
  if (trace_.empty()) return;
  if (cursor_ == trace_.size() && trace_[0] == chunk) {
    cursor_ = 1;  // the next step began
    in_sync_ = true;
    return;
  }
  if (!in_sync_) {
    // Lost since an access the trace did not have: back on it when its first access comes
    // round, taken as the next step's start (a mid-step repeat that is not loses it again).
    if (chunk == trace_[0]) {
      cursor_ = 1;
      in_sync_ = true;
    }
    return;
  }
  size_t end = std::min(trace_.size(), cursor_ + kResyncWindow);
  for (size_t p = cursor_; p < end; ++p) {
    if (trace_[p] == chunk) {
      cursor_ = p + 1;
      return;
    }
  }
  in_sync_ = false;
}

void AccessPolicy::start_recording() {
  recording_ = true;
  recorded_.clear();
}

std::vector<int> AccessPolicy::stop_recording() {
  recording_ = false;
  return std::move(recorded_);
}

void AccessPolicy::use_trace(std::vector<int> trace) {
  trace_ = std::move(trace);
  for (auto& p : positions_) p.clear();
  for (size_t i = 0; i < trace_.size(); ++i) {
    int c = trace_[i];
    TESSEL_CHECK(c >= 0 && size_t(c) < positions_.size(), "trace position ", i, " names chunk ", c,
                 " of ", positions_.size());
    positions_[size_t(c)].push_back(i);
  }
  cursor_ = 0;
  in_sync_ = true;
}

size_t AccessPolicy::next_use(int chunk, size_t from) const {
  const auto& pos = positions_[size_t(chunk)];
  if (pos.empty()) return kNever;
  size_t step = trace_.size();
  size_t base = from / step * step;
  auto it = std::lower_bound(pos.begin(), pos.end(), from - base);
  if (it != pos.end()) return base + *it;
  return base + step + pos.front();
}

int AccessPolicy::choose_victim(std::span<const int> candidates,
                                std::span<const uint8_t> clean) const {
  TESSEL_CHECK(clean.empty() || clean.size() == candidates.size(), "choose_victim: ", clean.size(),
               " clean flags for ", candidates.size(), " candidates");
  // Equal keys cost the same reads (MIN's count, or LRU's guess of it), but a dirty victim also
  // costs a write: among equals the clean one goes, then the lowest id.
  const auto is_clean = [&](size_t i) { return !clean.empty() && clean[i] != 0; };
  const auto preferred = [&](size_t i, size_t best) {
    if (is_clean(i) != is_clean(best)) return is_clean(i);
    return candidates[i] < candidates[best];
  };
  size_t best = SIZE_MAX;
  if (has_trace()) {
    size_t best_next = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const size_t next = next_use(candidates[i], cursor_);
      if (best == SIZE_MAX || next > best_next || (next == best_next && preferred(i, best))) {
        best = i;
        best_next = next;
      }
    }
  } else {
    uint64_t best_tick = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const uint64_t t = last_use_[size_t(candidates[i])];
      if (best == SIZE_MAX || t < best_tick || (t == best_tick && preferred(i, best))) {
        best = i;
        best_tick = t;
      }
    }
  }
  return best == SIZE_MAX ? -1 : candidates[best];
}

}  // namespace tessel::memory
