// SPDX-License-Identifier: Apache-2.0
// Kernel sets: the CPU kernels are compiled once per instruction-set level and one set is chosen
// when the process starts, so one binary is right and fast on any x86-64 CPU (docs/KERNELS.md).
//   baseline  x86-64-v2 (SSE4.2), what the rest of tessel is built for
//   avx2      x86-64-v3 (AVX2, FMA, F16C)
//   avx512    x86-64-v4 (AVX-512 F/CD/BW/DQ/VL)
// The best set that was built and that the CPU runs is chosen; TESSEL_KERNELS=<set> forces a
// lower one (tests run the op harness under each). The GEMMs come from oneDNN, which selects its
// own kernels (AVX-512, AVX-512-BF16, AMX) at run time whatever set is active.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

enum class KernelSet { Baseline, Avx2, Avx512 };

inline constexpr std::string_view kKernelSetVariable = "TESSEL_KERNELS";

std::string_view kernel_set_name(KernelSet set);
// "baseline", "avx2" or "avx512"; anything else throws an Error that lists them.
KernelSet parse_kernel_set(std::string_view name);

// Sets compiled into this binary (the configure-time code-generation check may drop one).
std::vector<KernelSet> built_kernel_sets();
// Whether this CPU (and its operating system) can execute the set's instructions.
bool cpu_runs_kernel_set(KernelSet set);
// Built and runnable here, lowest first.
std::vector<KernelSet> runnable_kernel_sets();

// The set the CPU backend uses: TESSEL_KERNELS when set (an unknown name, a set this CPU cannot
// run or one that was not built is an Error naming why), else the best runnable set. Fixed at
// the first call.
KernelSet active_kernel_set();

// The CPU backend compiled for `set` (an Error when it is not runnable here).
Backend& cpu_backend_for(KernelSet set);

// Sum of p[0, n) over the thread pool, as fast as the memory system allows, in the active set:
// the kernel behind the "read bandwidth" limit that memory-bound kernels and decoding are quoted
// against (`tessel bench peak`).
float stream_read_sum(const float* p, int64_t n);
// The same in a given set (tests; an Error when it is not runnable here).
float stream_read_sum(KernelSet set, const float* p, int64_t n);

// The byte dot product of the quantized matmul's integer sums (Q types, Int8), by kernel set and
// CPU: plain loops (baseline), vpmaddubsw + vpmaddwd (Avx2), AVX-VNNI's VEX vpdpbusd on 256-bit
// vectors (AvxVnni: avx2 and avx512 sets, where the CPU has it) or AVX-512 VNNI's (Avx512Vnni:
// avx512 set). Each set takes the highest its CPU has, up to a limit that tests and benchmarks
// lower to compare them; all give the same sums (docs/KERNELS.md, "Byte dot products").
enum class QuantDot { Scalar, Avx2, AvxVnni, Avx512Vnni };
std::string_view quant_dot_name(QuantDot dot);
// The dot product `set` uses on this CPU under the current limit.
QuantDot quant_dot_for(KernelSet set);
// Sets the limit (Avx512Vnni, the default, lets every set take its best). Not to be changed
// while a product runs.
void limit_quant_dot(QuantDot highest);
QuantDot quant_dot_limit();
// The vector width of the fused k-quant rows (Q4_K, Q5_K, Q6_K) that `set` runs: 512 in the
// avx512 set (two 32-weight blocks per instruction, cpu/quant_fused_rows512.h) unless limited to
// 256, 256 in the avx2 set, 0 in the baseline (plain loops). Both widths give the same outputs
// bit for bit (tests compare them through the limit, quant_bench times them). The limit (512,
// the default, or 256) is not to be changed while a product runs.
int quant_vector_bits_for(KernelSet set);
void limit_quant_vector_bits(int bits);
// Whether the avx512 set's 512-bit Q4_K decode rows take a block's nibbles with one GFNI byte
// transform (vgf2p8affineqb) instead of a shift and a mask: on a CPU with GFNI unless limited
// off. The codes are the same bytes, so the outputs are the same bits (tests compare the two
// through the limit; quant_bench's QUANT_BENCH_GFNI=0 times them). Not to be changed while a
// product runs.
bool quant_nibbles_gfni();
void limit_quant_gfni(bool allow);

// Which cache level the kernels' software prefetch of streamed weight rows asks for differs by
// micro-architecture, and where the two were measured apart the choice follows this (CPUID's
// vendor and display family; docs/KERNELS.md, "Prefetch level by CPU"): AMD's cores before
// Zen 5 (family 0x19 and below: Zen 4's L1 keeps too few misses in flight for many streams), Zen 5
// and later (0x1A on), and every other CPU. Read once.
enum class PrefetchFamily { AmdBeforeZen5, AmdZen5On, Other };
PrefetchFamily prefetch_family();

// Whether quantized matrices may take a layout of the CPU backend's own (Backend::quant_layout:
// Q4_0 regrouped four rows at a time, quant/q4_0_groups.h; the k-quants and Q8_0 interleaved
// four rows at a time, quant/row_interleave.h). TESSEL_QUANT_LAYOUT=file keeps them
// as their file stores them, to compare the kernels that read each; "auto" (the default) lets the
// backend choose; anything else is an Error naming both. Read once.
bool quant_backend_layouts();

// The int32 sums of `set`'s current dot product over 32-byte blocks: lanes[8 g + l] = sum of
// u[32 g + 4 l + i] * x[32 g + 4 l + i], i < 4 (u unsigned, x signed), as the kernels compute
// them (tests compare the dot products through it).
void quant_dot_lanes(KernelSet set, const uint8_t* u, const int8_t* x, int64_t blocks,
                     int32_t* lanes);

// One line for `tessel --version` and the benchmarks: the active set, how it was chosen, the
// built sets and the CPU's features.
std::string kernel_set_summary();

}  // namespace tessel::kernels
