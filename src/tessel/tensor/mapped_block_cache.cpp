// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/mapped_block_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tessel/core/error.h"

namespace tessel {

namespace {
// A cached block serves a request up to this fraction larger than it: shapes repeat exactly in a
// training step, so this only helps where they vary a little (the last batch of an evaluation).
constexpr size_t kSlackDivisor = 16;
// What the cache may hold beyond the most ever in use, as a fraction of it: room for the blocks of
// one phase of a step to wait for the next one instead of being remapped (page faults).
constexpr size_t kHeadroomDivisor = 8;
// While following cycles, the spare grows up to this fraction of the most ever in use (a spare of
// 1/2 removed the offloaded GPT-2 tiny step's page faults, BENCHMARKS.md), and this many sizes
// given back are remembered.
constexpr size_t kGrownDivisor = 2;
constexpr size_t kGivenBackSizes = 32;
}  // namespace

MappedBlockCache::MappedBlockCache() {
  const long p = sysconf(_SC_PAGESIZE);
  if (p > 0) page_ = size_t(p);
}

MappedBlockCache::~MappedBlockCache() {
  release_cached();
}

void* MappedBlockCache::map(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TESSEL_CHECK(p != MAP_FAILED, "out of host memory mapping ", bytes, " bytes (",
               std::strerror(errno), "; ", live_bytes_, " bytes in use, ", cached_bytes_,
               " cached)");
  ++maps_;
  return p;
}

void MappedBlockCache::unmap(const Block& b) {
  munmap(b.ptr, b.bytes);
  cached_bytes_ -= b.bytes;
}

void MappedBlockCache::set_limit() {
  grown_ = std::min(grown_, high_ / kGrownDivisor - high_ / kHeadroomDivisor);
  limit_ = high_ + high_ / kHeadroomDivisor + grown_;
}

void MappedBlockCache::gave_back(size_t bytes) {
  if (following_ == 0) return;
  if (given_back_.size() == kGivenBackSizes) given_back_.erase(given_back_.begin());
  given_back_.push_back(bytes);
}

bool MappedBlockCache::given_back_before(size_t need) {
  for (size_t i = given_back_.size(); i-- > 0;) {
    const size_t b = given_back_[i];
    if (std::max(b, need) - std::min(b, need) <= std::min(b, need) / kSlackDivisor) {
      given_back_.erase(given_back_.begin() + std::ptrdiff_t(i));
      return true;
    }
  }
  return false;
}

void* MappedBlockCache::take(size_t nbytes) {
  const size_t need = (std::max<size_t>(nbytes, 1) + page_ - 1) / page_ * page_;
  std::lock_guard<std::mutex> lock(mu_);
  // A cached block of about this size: its pages are resident already.
  size_t best = cached_.size();
  for (size_t i = 0; i < cached_.size(); ++i) {
    const size_t b = cached_[i].bytes;
    if (b >= need && b <= need + need / kSlackDivisor &&
        (best == cached_.size() || b < cached_[best].bytes))
      best = i;
  }
  void* p = nullptr;
  size_t bytes = need;
  if (best < cached_.size()) {
    p = cached_[best].ptr;
    bytes = cached_[best].bytes;
    cached_bytes_ -= bytes;
    cached_.erase(cached_.begin() + std::ptrdiff_t(best));
  } else {
    high_ = std::max(high_, live_bytes_ + need);
    set_limit();
    if (following_ > 0 && !cached_.empty() && live_bytes_ + cached_bytes_ + need > limit_ &&
        given_back_before(need)) {
      // A block of this size was given back under the bound and is wanted again: a cycle the
      // spare does not hold. Grow it by what this request passes the bound by.
      grown_ += live_bytes_ + cached_bytes_ + need - limit_;
      set_limit();
    }
    if (!cached_.empty() && live_bytes_ + cached_bytes_ + need > limit_) {
      // A new mapping would pass the most ever in use: remap the cached block closest in size
      // (the least recently freed among equals), which keeps its resident pages.
      size_t pick = 0;
      auto distance = [&](size_t i) {
        const size_t b = cached_[i].bytes;
        return b > need ? b - need : need - b;
      };
      for (size_t i = 1; i < cached_.size(); ++i)
        if (distance(i) < distance(pick) ||
            (distance(i) == distance(pick) && cached_[i].freed < cached_[pick].freed))
          pick = i;
      const Block b = cached_[pick];
      cached_.erase(cached_.begin() + std::ptrdiff_t(pick));
      cached_bytes_ -= b.bytes;
      gave_back(b.bytes);
      void* q = mremap(b.ptr, b.bytes, need, MREMAP_MAYMOVE);
      if (q == MAP_FAILED) {
        munmap(b.ptr, b.bytes);
      } else {
        p = q;
        ++maps_;
      }
      // Still above: give back the least recently freed blocks.
      while (!cached_.empty() && live_bytes_ + cached_bytes_ + need > limit_) {
        auto oldest =
            std::min_element(cached_.begin(), cached_.end(),
                             [](const Block& a, const Block& c) { return a.freed < c.freed; });
        gave_back(oldest->bytes);
        unmap(*oldest);
        cached_.erase(oldest);
      }
    }
    if (p == nullptr) p = map(need);
  }
  live_.emplace(p, bytes);
  live_bytes_ += bytes;
  return p;
}

void MappedBlockCache::give(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  TESSEL_CHECK(it != live_.end(), "MappedBlockCache: freeing ", ptr,
               ", which is not a block it handed out");
  cached_.push_back({ptr, it->second, ++frees_});
  cached_bytes_ += it->second;
  live_bytes_ -= it->second;
  live_.erase(it);
}

void MappedBlockCache::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Block& b : cached_) munmap(b.ptr, b.bytes);
  cached_.clear();
  cached_bytes_ = 0;
}

size_t MappedBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

size_t MappedBlockCache::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_ + cached_bytes_;
}

size_t MappedBlockCache::spare_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_ - high_;
}

void MappedBlockCache::follow_cycles(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  following_ += on ? 1 : -1;
  TESSEL_CHECK(following_ >= 0, "MappedBlockCache: follow_cycles(false) without a matching on");
  if (following_ > 0) return;
  given_back_.clear();
  grown_ = 0;
  set_limit();
}

int64_t MappedBlockCache::maps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return maps_;
}

}  // namespace tessel
