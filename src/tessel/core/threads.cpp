// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/threads.h"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "tessel/core/error.h"
#include "tessel/core/thread_pool.h"

namespace tessel {

namespace {
int initial_threads() {
  int n = omp_get_num_procs();
  if (const char* env = std::getenv("TESSEL_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    TESSEL_CHECK(end != env && *end == '\0' && v >= 1 && v <= 4096,
                 "TESSEL_NUM_THREADS must be an integer in [1, 4096], got '", env, "'");
    n = int(v);
  }
  omp_set_num_threads(n);
  return n;
}

int& thread_setting() {
  static int n = initial_threads();
  return n;
}
}  // namespace

int num_threads() {
  return thread_setting();
}

void set_num_threads(int n) {
  TESSEL_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  thread_setting() = n;
  omp_set_num_threads(n);
}

void poll_between_regions_by_default() {
  detail::default_pool_spin_us(detail::kDecodeSpinUs);
}

void wait_passively_by_default(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run with the default policy
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int threads = num_threads();
  if (threads == 1 || n <= grain || omp_in_parallel() || detail::in_pool_region()) {
    fn(begin, end);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (detail::pool_spin_us() >= 0) {
    detail::pool_run(threads, begin, n, chunks, fn);
    return;
  }
#pragma omp parallel num_threads(int(chunks))
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t lo = begin + n * t / nt, hi = begin + n * (t + 1) / nt;
    if (lo < hi) fn(lo, hi);
  }
}

}  // namespace tessel
