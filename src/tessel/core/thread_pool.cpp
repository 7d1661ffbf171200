// SPDX-License-Identifier: Apache-2.0
// Persistent spin-then-block worker pool (see thread_pool.h for why and which ideas).
#include "tessel/core/thread_pool.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "tessel/core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tessel::detail {

namespace {

thread_local bool t_in_region = false;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Sleeps while `word` holds `seen`, and wakes its sleepers. On Linux a raw futex: libstdc++ 12's
// std::atomic wait/notify was measured to leave a sleeping worker unwoken for most regions.
void futex_wait(std::atomic<uint32_t>& word, uint32_t seen) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr,
          0);
#else
  word.wait(seen, std::memory_order_seq_cst);
#endif
}

void futex_wake_all(std::atomic<uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
#else
  word.notify_all();
#endif
}

// The setting as the environment gives it: kSpinUnset when absent, -1 for "off".
constexpr int64_t kSpinUnset = -2;

int64_t read_spin_us() {
  const char* env = std::getenv("TESSEL_POOL_SPIN_US");
  if (env == nullptr || *env == '\0') return kSpinUnset;
  if (std::string_view(env) == "off") return -1;
  char* end = nullptr;
  long v = std::strtol(env, &end, 10);
  TESSEL_CHECK(end != env && *end == '\0' && v >= 0 && v <= 1000000,
               "TESSEL_POOL_SPIN_US must be 'off' or an integer in [0, 1000000], got '", env, "'");
  return v;
}

// Marks the thread as inside a region and limits OpenMP regions started from it to one thread,
// as they were when the region was an OpenMP team (nested regions ran serially).
class RegionScope {
 public:
  RegionScope() : saved_omp_(omp_get_max_threads()) {
    t_in_region = true;
    omp_set_num_threads(1);
  }
  ~RegionScope() {
    omp_set_num_threads(saved_omp_);
    t_in_region = false;
  }
  RegionScope(const RegionScope&) = delete;
  RegionScope& operator=(const RegionScope&) = delete;

 private:
  int saved_omp_;
};

class Pool {
 public:
  Pool(int workers, int64_t spin_us) : spin_us_(spin_us) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
  }
  ~Pool() {
    stop_.store(true);
    generation_.fetch_add(1);
    futex_wake_all(generation_);
    for (auto& t : threads_) t.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int workers() const { return int(threads_.size()); }
  int64_t spin_us() const { return spin_us_; }

  // The caller holds the pool's run lock.
  void run(int64_t begin, int64_t n, int64_t chunks,
           const std::function<void(int64_t, int64_t)>& fn) {
    fn_ = &fn;
    begin_ = begin;
    n_ = n;
    chunks_ = chunks;
    done_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    ++job_;
    bound_.store(job_ << 32 | uint64_t(chunks), std::memory_order_release);
    ticket_.store(job_ << 32, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(generation_);
    {
      RegionScope scope;
      work(job_);
    }
    // The chunks still running belong to workers that claimed them: poll briefly, then sleep
    // until the last one ends (a polling caller would hold the core a descheduled worker needs).
    wait_until_done();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Claims chunks of job `job` until none is left; a job that has moved on claims nothing.
  void work(uint64_t job) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
      if ((t >> 32) != job) return;
      uint64_t c = t & 0xffffffffu;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
        continue;
      // A claim past the last chunk may be stale (the job over, the next one being written): the
      // job's bound carries its id. A claim below it holds the job open until it is counted.
      uint64_t bound = bound_.load(std::memory_order_acquire);
      if ((bound >> 32) != job) return;
      const int64_t chunks = int64_t(bound & 0xffffffffu);
      if (int64_t(c) >= chunks) return;
      int64_t lo = begin_ + n_ * int64_t(c) / chunks, hi = begin_ + n_ * int64_t(c + 1) / chunks;
      if (lo < hi && !failed_.load(std::memory_order_relaxed)) run_chunk(lo, hi);
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == uint32_t(chunks) &&
          caller_sleeping_.load(std::memory_order_seq_cst))
        futex_wake_all(done_);
      t = ticket_.load(std::memory_order_acquire);
    }
  }

  void wait_until_done() {
    const uint32_t chunks = uint32_t(chunks_);
    for (int i = 0; i < 2048; ++i) {
      if (done_.load(std::memory_order_acquire) == chunks) return;
      cpu_relax();
    }
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    for (uint32_t d = done_.load(std::memory_order_seq_cst); d != chunks;
         d = done_.load(std::memory_order_seq_cst))
      futex_wait(done_, d);
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }

  // The first exception of a region is kept for the caller to rethrow once every claimed chunk
  // has finished (fn's captures live on the caller's stack); chunks claimed after it are skipped.
  void run_chunk(int64_t lo, int64_t hi) {
    try {
      (*fn_)(lo, hi);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }

  void worker_loop() {
    omp_set_num_threads(1);
    t_in_region = true;
    uint32_t seen =
        0;  // the value before the first region: a late-starting worker sees every change
    for (;;) {
      uint32_t g = wait_for_change(seen);
      seen = g;
      if (stop_.load()) return;
      work(ticket_.load(std::memory_order_acquire) >> 32);
    }
  }

  uint32_t wait_for_change(uint32_t seen) {
    using Clock = std::chrono::steady_clock;
    if (spin_us_ > 0) {
      auto deadline = Clock::now() + std::chrono::microseconds(spin_us_);
      for (int i = 1;; ++i) {
        uint32_t g = generation_.load(std::memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if ((i & 63) == 0 && Clock::now() >= deadline) break;
      }
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    uint32_t g = generation_.load(std::memory_order_seq_cst);
    while (g == seen) {
      futex_wait(generation_, seen);
      g = generation_.load(std::memory_order_seq_cst);
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    return g;
  }

  const int64_t spin_us_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> generation_{0};  // bumped per region: what idle workers wait on
  std::atomic<int> sleepers_{0};
  std::atomic<uint64_t> ticket_{0};  // job id << 32 | next chunk to claim
  std::atomic<uint64_t> bound_{0};   // job id << 32 | its number of chunks
  std::atomic<uint32_t> done_{0};    // chunks finished
  std::atomic<bool> caller_sleeping_{false};
  uint64_t job_ = 0;
  // The job in flight: written by the caller before it publishes the ticket, read by a worker
  // only after it claimed a chunk of that ticket (the job cannot end before that chunk is done).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t begin_ = 0, n_ = 0, chunks_ = 0;
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

std::mutex& pool_mutex() {
  static auto* m = new std::mutex;  // never destroyed: workers may outlive static destruction
  return *m;
}

std::unique_ptr<Pool>& pool_slot() {
  static auto* p = new std::unique_ptr<Pool>;
  return *p;
}

void run_inline(int64_t begin, int64_t n, int64_t chunks,
                const std::function<void(int64_t, int64_t)>& fn) {
  RegionScope scope;
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t lo = begin + n * c / chunks, hi = begin + n * (c + 1) / chunks;
    if (lo < hi) fn(lo, hi);
  }
}

}  // namespace

std::atomic<int64_t>& spin_setting() {
  static std::atomic<int64_t> us{read_spin_us()};
  return us;
}

int64_t pool_spin_us() {
  const int64_t us = spin_setting().load(std::memory_order_relaxed);
  return us == kSpinUnset ? -1 : us;
}

void set_pool_spin_us(int64_t us) {
  spin_setting().store(us < 0 ? -1 : us, std::memory_order_relaxed);
}

void default_pool_spin_us(int64_t us) {
  int64_t unset = kSpinUnset;
  spin_setting().compare_exchange_strong(unset, us < 0 ? -1 : us, std::memory_order_relaxed);
}

bool in_pool_region() {
  return t_in_region;
}

void pool_run(int threads, int64_t begin, int64_t n, int64_t chunks,
              const std::function<void(int64_t, int64_t)>& fn) {
  std::unique_lock<std::mutex> lock(pool_mutex(), std::try_to_lock);
  if (!lock.owns_lock()) {  // another thread's region holds the workers
    run_inline(begin, n, chunks, fn);
    return;
  }
  auto& pool = pool_slot();
  const int64_t spin_us = std::max<int64_t>(0, pool_spin_us());
  if (!pool || pool->workers() != threads - 1 || pool->spin_us() != spin_us) {
    pool.reset();
    pool = std::make_unique<Pool>(threads - 1, spin_us);
  }
  pool->run(begin, n, chunks, fn);
}

}  // namespace tessel::detail
