// SPDX-License-Identifier: Apache-2.0
// The planner's compute cost: the time of each traced op by the roofline model (Williams,
// Waterman & Patterson 2009): an op takes the longer of its FLOPs at the device's peak and its
// bytes at the memory bandwidth. A GEMM's peak is scaled by the efficiency calibration measured for
// its shape and operand layout (Cluster::gemm_efficiency), since small and thin products reach a
// fraction of it; a kernel that calibration measured is read off its measured curve at its
// roofline time (plan/kernel_curve.h), any other at the roofline; every op adds the calibrated
// cost of an op outside its kernel (device.op_overhead, and op_overhead_per_byte for each byte it
// writes). Where calibration also measured each kernel with its operands in the private caches
// (warm) and the description gives those caches' size, an op's kernel time moves from the evicted
// figure towards the warm one by the share of the bytes it reads that the step touched recently
// enough to still be cached: their reuse distance (Mattson et al. 1970's stack distance, counted
// in bytes over the traced op order) at most the cache. Summed over a traced step (plan/trace.h)
// per phase. docs/PLANNER.md, "Step time".
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessel/plan/cluster.h"
#include "tessel/plan/graph.h"

namespace tessel::plan {

struct OpTime {
  double seconds = 0;           // the kernel's time (below) + overhead_seconds
  double compute_seconds = 0;   // FLOPs / (peak × efficiency)
  double memory_seconds = 0;    // (bytes read + written) / bandwidth
  double kernel_seconds = 0;    // the measured curve's time when calibrated, else the roofline
  double overhead_seconds = 0;  // device.op_overhead + op_overhead_per_byte × bytes written
  double efficiency = 1;        // the GEMM efficiency applied (1 for other kernels)
  bool calibrated = false;      // read off the kernel's measured curve
  double cache_hit = 0;         // share of the bytes read found in the private caches
};

// The roofline time that indexes a kernel's measured curve: max(FLOPs / f32 peak, bytes /
// bandwidth), the same for a measured call and a traced op, so the curve maps one to the other.
double roofline_index(const Cluster& cluster, double flops, double bytes);

// The product shape of a GEMM node: [b, m, k] x [k, n] as the output [.., m, n] and its matmul
// FLOPs (2·b·m·n·k) give it.
struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
};
GemmShape gemm_shape(const OpNode& op);

// The dtype whose peak an op runs at: its first input's ("bf16", "f16"), "f32" otherwise; a
// 16-bit dtype the cluster gives no peak for runs at the f32 peak (the CPU backend widens it).
std::string peak_dtype(const Cluster& cluster, const OpNode& op);

// `cache_hit`: the share of the bytes the op reads that are still in the private caches
// (cache_hit_fractions); the kernel's time is the evicted figure moved that far towards the warm
// one, where calibration measured both.
OpTime op_time(const Cluster& cluster, const OpNode& op, double cache_hit = 0);

// Per op of `ops` (in the order they run), the share of its input bytes whose reuse distance —
// the bytes of the distinct storages the ops read or wrote since the op that last read or wrote
// the same storage (LRU stack distance) — plus the input's own bytes is at most `cache_bytes`:
// an LRU cache of that size still holds them. Parameters and other leaves count from their first
// touch; a tensor never touched before in the list misses. All zeros when `cache_bytes` <= 0.
std::vector<double> cache_hit_fractions(const std::vector<OpNode>& ops, double cache_bytes);

struct ComputeTime {
  std::array<double, kNumPhases> seconds{};    // by Phase
  double gemm_seconds = 0, other_seconds = 0;  // each with its ops' overhead
  double overhead_seconds = 0;                 // the ops' overhead alone
  // By kernel name ("gemm", "layer_norm_backward", ...), each with its ops' overhead: what a
  // profiled step (`tessel bench train --breakdown`) is set against, kernel by kernel.
  std::map<std::string, double> kernel_seconds;
  double total() const { return seconds[0] + seconds[1] + seconds[2]; }
};

// The graph's ops one after another on one device (the kernels run one at a time).
ComputeTime graph_compute_time(const Cluster& cluster, const Graph& graph);

// AdamW over `elements` f32 parameters in `tensors` calls (one per parameter tensor, as the
// optimizer runs it): reads parameter, gradient and both moments, writes parameter and moments
// (28 bytes), 12 FLOPs each. Each call at the "adamw" kernel's measured curve for the mean tensor
// plus the op overhead when calibrated; one bandwidth-bound pass otherwise.
double adamw_seconds(const Cluster& cluster, double elements, double tensors = 1);

// The passes over `elements` f32 gradients that the trainer makes between backward and the
// update, each bound by memory bandwidth: the global norm reads every gradient once (4 bytes; its
// squares are summed for clipping and the logged grad_norm), and one pass scales them (read and
// write, 8 bytes: 1/accumulation and clipping folded together).
double gradient_passes_seconds(const Cluster& cluster, double elements);

}  // namespace tessel::plan
