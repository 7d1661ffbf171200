// SPDX-License-Identifier: Apache-2.0
// Thread count control. tessel's kernels (their own pool) and the GEMM library (OpenMP) use the
// same count, so there is one knob: TESSEL_NUM_THREADS (default: all cores), or set_num_threads().
#pragma once

#include <cstdint>
#include <functional>

namespace tessel {

int num_threads();
void set_num_threads(int n);  // n >= 1; throws Error otherwise

// Runs fn(lo, hi) over [begin, end) split into min(threads, ceil(n / grain)) contiguous chunks,
// run by tessel's persistent pool (thread_pool.h; the GEMM library keeps its OpenMP pool). Ranges
// of at most `grain` elements, calls from inside a region and one thread run on the calling thread.
// Called by the commands that decode token by token: unless TESSEL_POOL_SPIN_US says otherwise,
// parallel_for's pool polls between regions (thread_pool.h says why only these commands).
void poll_between_regions_by_default();

// The GEMM library's OpenMP threads (and tessel's kernels' regions when the pool is off) should
// wait passively between parallel regions (DESIGN.md): libgomp's default spins first, and on a
// machine whose cores are also busy with other work the spinning threads take the cycles the
// working ones need (a GPT-2 training step ran 2x slower that way). libgomp reads the policy when
// it loads, before main, so when the user has not chosen one this sets it and starts the program
// again, once (`argv` is main's). Call first thing in main.
void wait_passively_by_default(char** argv);

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tessel
