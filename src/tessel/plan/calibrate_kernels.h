// SPDX-License-Identifier: Apache-2.0
// The per-op measurements of `tessel plan calibrate` (internal to plan/; calibrate.cpp agrees
// them across ranks): GEMM rates over a grid of shapes for each operand layout a training step
// uses (nn::Linear's forward "nt", its input gradient "nn", its weight gradient "tn"), the time
// of each other kernel a step runs at several sizes, and the cost of an op outside its kernel.
// Every call goes through the real CPU backend; its bytes and FLOPs are those the meta backend
// reports for the same call, so a measured point and a traced op are counted alike.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessel/plan/cluster.h"
#include "tessel/tensor/tensor.h"

namespace tessel::plan {

// Turns this rank's median seconds into the figure every rank records (the slowest rank's); the
// measurement functions call `before` first, so that every rank starts each figure together.
struct Agreement {
  std::function<void()> before;
  std::function<double(double)> slowest;
};

// Sizes of each axis of the GEMM grid: every (m, n, k) from them, per layout.
std::vector<int64_t> gemm_grid_sizes(bool quick);

// The grid for one dtype ("f32", "bf16") and the layouts nt, nn, tn.
std::vector<GemmPoint> measure_gemm_grid(DType dtype, bool quick, double budget,
                                         const Agreement& agree,
                                         const std::function<void(const GemmPoint&)>& say);

// Every other kernel of a training step at a few sizes, in f32.
std::vector<KernelPoint> measure_kernels(bool quick, double budget, const Agreement& agree,
                                         const std::function<void(const KernelPoint&)>& say);

// What a profiled step spent outside its kernels (CPU seconds, the median step's), and the ops
// and the bytes they write that its trace records.
struct OverheadSample {
  double ops = 0, bytes_written = 0, seconds = 0;
};

// The cost of an op outside its kernel: `per_op` seconds each and `per_byte` for each byte it
// writes (allocating and first touching its output, the copies that grow with it).
struct OpOverhead {
  double per_op = 0, per_byte = 0;
};

// Solves seconds = per_op · ops + per_byte · bytes_written through two steps of different sizes.
// When the two do not determine a non-negative per_byte (equal proportions, or noise making the
// larger step cheaper per byte), per_byte is 0 and per_op the smaller step's seconds per op;
// neither is ever below 0.
OpOverhead fit_op_overhead(const OverheadSample& small, const OverheadSample& large);

// The cost of an op outside its kernel, measured: a small GPT-2's training step through the ops
// and autograd layers at two sizes (the same ops, 32 times the bytes), profiled, each step's CPU
// time less its kernel calls' CPU time (the median step's), fitted by fit_op_overhead against the
// ops and bytes written its trace records.
OpOverhead measure_op_overhead(double budget, const Agreement& agree);

}  // namespace tessel::plan
