// SPDX-License-Identifier: Apache-2.0
// The planner's dataflow graph of one training step (TensorFlow's and Alpa's graph of ops, as
// Merak's proxy model traces it shape-only): one node per kernel the step runs, with its tensors'
// shapes and dtypes, FLOPs, bytes read and written, the phase it runs in, the module it belongs
// to and the nodes that produced its inputs; plus the activation bytes autograd keeps from the
// forward for the backward. plan/trace.h records it; the cost and memory models read it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/kernels/kernel_observer.h"

namespace tessel::plan {

// Recompute: forward work that activation recomputation runs again inside the backward.
enum class Phase { Forward, Backward, Recompute };
std::string_view phase_name(Phase phase);
inline constexpr int kNumPhases = 3;

struct Cost {
  double flops = 0, matmul_flops = 0, bytes_read = 0, bytes_written = 0;
  int64_t ops = 0;
  void add(const Cost& other);
  bool operator==(const Cost&) const = default;
};

struct OpNode {
  std::string kernel;  // "gemm", "attention_backward", "copy", ...
  std::string detail;  // "gelu", "add", "log", ... (may be empty)
  Phase phase = Phase::Forward;
  int module = -1;  // index into Graph::modules; -1: outside every module
  std::vector<kernels::TensorDesc> inputs, outputs;
  // Per input: the node that wrote it last, -1 for parameters, inputs and other leaves.
  std::vector<int64_t> producers;
  Cost cost;  // ops = 1
};

// A collective the step issues (recorded from the runtime's own parallel code run over a meta
// communicator, dist/meta/meta_communicator.h): bytes as nccl-tests count them (the buffer of an
// all-reduce or broadcast, the whole gathered or scattered buffer, the message of send/recv).
struct CollectiveNode {
  std::string op;    // dist::op_kind_name: "all_reduce", "all_gather", ...
  std::string axis;  // the communicator's label: "tp", ...
  int ranks = 1;     // the group's size
  double bytes = 0;
  Phase phase = Phase::Forward;
};

struct ModuleInfo {
  std::string path;  // "" for the root, "h.3.attn", ...
  std::string type;  // the module's type name
  int parent = -1;
};

struct Graph {
  std::vector<ModuleInfo> modules;
  std::vector<OpNode> ops;
  // Bytes of the distinct tensors (by storage) that the forward's autograd nodes keep for the
  // backward, parameters excluded: the activation memory alive when the forward ends.
  double saved_bytes = 0;
  std::vector<double> saved_bytes_by_module;  // attributed to the module that first saved it
  double saved_bytes_outside = 0;             // saved outside every module
  double parameter_bytes = 0;
  int64_t parameter_count = 0;
  int64_t parameter_tensors = 0;  // distinct parameter tensors (the optimizer's calls)
  // The most bytes meta tensors held at once during the step above what was live when it began
  // (activations, temporaries, 16-bit weight copies and, unless held before, gradients): what the
  // host allocator's step peak counts for the same step (tensor/allocator.h, MetaAllocator).
  double step_peak_bytes = 0;
  std::vector<CollectiveNode> collectives;  // in issue order

  Cost total() const;
  Cost phase_total(Phase phase) const;
  // Per module: its own ops (self) or with its descendants' (inclusive), one entry per module.
  std::vector<Cost> module_costs(bool inclusive, int phase = -1) const;
  // Saved bytes of each module with its descendants'.
  std::vector<double> module_saved_bytes_inclusive() const;
  // A module's depth below the root (root 0).
  int depth(int module) const;
};

}  // namespace tessel::plan
