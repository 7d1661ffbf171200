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

// Seconds per traced op outside its kernel: a small GPT-2's training step through the ops and
// autograd layers, profiled, its CPU time less its kernel calls' CPU time, divided by the ops its
// trace records; the median step's figure, never below 0.
double measure_op_overhead(double budget, const Agreement& agree);

}  // namespace tessel::plan
