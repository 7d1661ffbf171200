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
// Who uses it (docs/DECISIONS.md "Threads"): commands that decode token by token (generate, serve,
// bench generate, bench serve) turn it on with kDecodeSpinUs of polling, which made two-thread
// decode 1.2-2.7x faster than passive OpenMP regions on a quiet 2-core machine; other commands
// (training's large regions) keep OpenMP regions, because polling workers on a loaded machine are
// descheduled as CPU hogs and regions took up to 6x longer (docs/BENCHMARKS.md, "Two-thread
// decode"). TESSEL_POOL_SPIN_US=N (N µs, 0: block at once) or =off overrides either default.
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

// How long an idle worker polls before it sleeps, in µs; -1: the pool is off and parallel_for
// opens an OpenMP region per call (TESSEL_POOL_SPIN_US=off, or unset and no default given).
int64_t pool_spin_us();
void set_pool_spin_us(int64_t us);  // tests; a negative value turns the pool off

// The command's choice, used only when TESSEL_POOL_SPIN_US is unset (and no test set one).
void default_pool_spin_us(int64_t us);

// The polling the decoding commands choose: about one futex wake-up and reschedule of a worker
// on the machines measured (Karlin et al.'s bound asks for a spin of that length).
constexpr int64_t kDecodeSpinUs = 100;

}  // namespace tessel::detail
