// SPDX-License-Identifier: Apache-2.0
// The persistent worker pool behind parallel_for. A decode step runs ~50 short parallel regions
// per token (one per matrix product, a few µs to a few hundred µs each); an OpenMP region that
// waits passively pays a futex wake-up of every worker per region, as much as a small product
// saves by being split. Here the workers stay alive and wait in two phases (spin, then block:
// Ousterhout's "two-phase waiting", 1982; Karlin et al. 1991 bound its cost at twice the optimum
// when the spin lasts about one wake-up): they poll for a bounded time after each region, so the
// next product of the same token finds them awake, and then sleep on a futex, so an idle server
// does not burn its cores.
//
// A region is cut into the same chunks as before (chunk i of c covers [b + n·i/c, b + n·(i+1)/c)),
// so what each fn(lo, hi) call sees does not depend on who runs it; the chunks are claimed from a
// shared counter (self-scheduling), so a worker that is descheduled or still asleep leaves its
// chunk to the caller instead of stalling it.
//
// Opt-in (TESSEL_POOL_SPIN_US=N, N µs of polling, 0: block at once): on the loaded 2-vCPU machine
// where it was measured, polling workers were descheduled as CPU hogs and regions took up to 6x
// longer than OpenMP's passive ones, and with N = 0 decode was no faster than OpenMP
// (docs/BENCHMARKS.md, "Two-thread decode: the per-region cost"). A quiet machine has not been
// measured.
#pragma once

#include <cstdint>
#include <functional>

namespace tessel::detail {

// Runs fn over `chunks` chunks of [begin, begin + n) using `threads` threads (the caller and
// threads - 1 pool workers). Called from outside any parallel region; another thread's region in
// flight makes this one run its chunks on the calling thread, in order.
void pool_run(int threads, int64_t begin, int64_t n, int64_t chunks,
              const std::function<void(int64_t, int64_t)>& fn);

// True on a pool worker, and on a caller while it runs chunks: parallel_for nests serially there.
bool in_pool_region();

// How long an idle worker polls before it sleeps, in µs; -1 (TESSEL_POOL_SPIN_US unset): the pool
// is off and parallel_for opens an OpenMP region per call, as before the pool.
int64_t pool_spin_us();
void set_pool_spin_us(int64_t us);  // tests; a negative value turns the pool off

}  // namespace tessel::detail
