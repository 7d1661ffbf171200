// SPDX-License-Identifier: Apache-2.0
// The kernel observer behind the planner's traces (trace.cpp, pipeline_trace.cpp): one graph node
// per kernel the meta backend reports, with its phase, module, producers and cost, and the
// most meta bytes live during a kernel once the CPU backend's f32 stand-ins of 16-bit operands
// are added (kernels/cpu/half_kernels.h). Internal to plan/.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/scope.h"
#include "tessel/dist/meta/meta_communicator.h"
#include "tessel/kernels/bf16_gemm_path.h"
#include "tessel/kernels/kernel_observer.h"
#include "tessel/plan/graph.h"
#include "tessel/plan/unfused_attention.h"
#include "tessel/tensor/meta_allocator.h"

namespace tessel::plan {

// A GEMM's rows (GemmDesc::m) from what the meta backend reports (a, b; c): a 2-D c is [m, n];
// a c of more dimensions is a Linear's [..., n] over a 2-D weight (m its leading dimensions
// flattened) or a batched product's [batch..., m, n].
inline int64_t gemm_rows(const std::vector<kernels::TensorDesc>& inputs,
                         const std::vector<kernels::TensorDesc>& outputs) {
  if (outputs.empty() || outputs.front().shape.ndim() < 2) return 1;
  const Shape& c = outputs.front().shape;
  if (c.ndim() == 2) return c[0];
  if (inputs.size() >= 2 && inputs[1].shape.ndim() <= 2) return c.numel() / c[c.ndim() - 1];
  return c[c.ndim() - 2];
}

// The f32 stand-ins the CPU backend allocates for the duration of a kernel on 16-bit tensors: 4
// bytes an element of every 16-bit operand and output the meta backend reports, for the kernel
// families the CPU backend runs that way (kernels/cpu/half_kernels.h). GEMMs widen in f16, and in
// bf16 where this CPU has no native bf16 product of their rows (kernels/bf16_gemm_path.h: no
// AVX-512-BF16, or from 64 rows without AMX); an embedding's backward adds its rows in f32 a row
// at a time (no stand-in of the table). Not counted: a widened grouped GEMM widens one group at
// a time, whose rows the meta device does not know (the experts' routing is data).
// tests/plan/half_stand_ins_test.cpp holds the CPU backend to it, family by family.
inline double half_stand_in_bytes(std::string_view kernel,
                                  const std::vector<kernels::TensorDesc>& inputs,
                                  const std::vector<kernels::TensorDesc>& outputs) {
  static const std::set<std::string, std::less<>> widened = {
      "unary",         "unary_backward",         "binary",     "reduce",
      "softmax",       "softmax_backward",       "layer_norm", "layer_norm_backward",
      "rms_norm",      "rms_norm_backward",      "attention",  "attention_backward",
      "cross_entropy", "cross_entropy_backward", "dropout"};
  const DType dt = inputs.empty() ? DType::F32 : inputs.front().dtype;
  const bool widened_gemm =
      kernel == "gemm" &&
      (dt == DType::F16 ||
       (dt == DType::BF16 && kernels::cpu_bf16_gemm_widens(gemm_rows(inputs, outputs))));
  if (!widened_gemm && !widened.contains(kernel)) return 0;
  double bytes = 0;
  for (const auto* list : {&inputs, &outputs})
    for (const kernels::TensorDesc& t : *list)
      if (t.dtype == DType::BF16 || t.dtype == DType::F16) bytes += 4 * double(t.shape.numel());
  return bytes;
}

class Recorder final : public kernels::KernelObserver {
 public:
  // `unfused_attention`: attention nodes re-costed as unfused kernels (unfused_attention.h).
  Recorder(Graph& graph, bool stand_ins, bool unfused_attention = false)
      : graph_(graph), stand_ins_(stand_ins), unfused_attention_(unfused_attention) {}
  // The most meta bytes live during a kernel, its f32 stand-ins included.
  double kernel_peak() const { return kernel_peak_; }
  // Starts the kernel peak again (a stage's trace reads it action by action).
  void reset_kernel_peak() { kernel_peak_ = 0; }
  void set_backward(bool on = true) { backward_ = on; }
  bool backward() const { return backward_; }
  // Storages written so far.
  std::vector<const void*> written() const {
    std::vector<const void*> out;
    for (const auto& [storage, op] : writer_) out.push_back(storage);
    return out;
  }

  // A collective of the traced step (a meta communicator's call).
  void on_collective(const dist::OpCall& call, const dist::CommInfo& info) {
    CollectiveNode c;
    c.op = std::string(dist::op_kind_name(call.kind));
    c.axis = info.label;
    c.ranks = info.size;
    const bool gathered = call.kind == dist::OpKind::AllGather ||
                          call.kind == dist::OpKind::AllGatherV || call.kind == dist::OpKind::Recv;
    const Tensor& t = gathered || !call.in.defined() ? call.out : call.in;
    c.bytes = t.defined() ? double(t.numel()) * double(dtype_size(t.dtype())) : 0;
    c.phase = !backward_ ? Phase::Forward
                         : (autograd::grad_enabled() ? Phase::Recompute : Phase::Backward);
    graph_.collectives.push_back(std::move(c));
  }
  // Observes the meta communicators' calls on this thread while it lives.
  dist::MetaCallObserver collective_observer() {
    return
        [this](const dist::OpCall& call, const dist::CommInfo& info) { on_collective(call, info); };
  }

  void on_kernel(const kernels::KernelEvent& e) override {
    OpNode op;
    op.kernel = std::string(e.kernel);
    op.detail = std::string(e.detail);
    // Inside the backward, grad mode is on only while a checkpoint recomputes its forward.
    op.phase = !backward_ ? Phase::Forward
                          : (autograd::grad_enabled() ? Phase::Recompute : Phase::Backward);
    op.module = int(autograd::current_scope());
    op.inputs = e.inputs;
    op.outputs = e.outputs;
    for (const kernels::TensorDesc& t : e.inputs) {
      auto it = writer_.find(t.storage);
      op.producers.push_back(it == writer_.end() ? -1 : it->second);
    }
    const int64_t id = int64_t(graph_.ops.size());
    for (const kernels::TensorDesc& t : e.outputs) writer_[t.storage] = id;
    op.cost = {e.flops, e.matmul_flops, e.bytes_read, e.bytes_written, 1};
    if (unfused_attention_ && is_attention(op)) {
      op.cost = unfused_attention_cost(op);
      op.detail = kUnfusedDetail;
    }
    if (stand_ins_) count_stand_ins(op);
    graph_.ops.push_back(std::move(op));
  }

 private:
  void count_stand_ins(const OpNode& op) {
    const double bytes = half_stand_in_bytes(op.kernel, op.inputs, op.outputs);
    if (bytes > 0)
      kernel_peak_ = std::max(kernel_peak_, double(meta_allocator().bytes_in_use()) + bytes);
  }

  Graph& graph_;
  bool stand_ins_ = false;
  bool unfused_attention_ = false;
  double kernel_peak_ = 0;
  bool backward_ = false;
  std::unordered_map<const void*, int64_t> writer_;  // storage -> the op that wrote it last
};

}  // namespace tessel::plan
