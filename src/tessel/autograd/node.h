// SPDX-License-Identifier: Apache-2.0
// Node: one recorded backward function of the tape (reverse-mode automatic differentiation as in
// PyTorch's autograd). A node maps the gradients of its forward outputs to the gradients of its
// forward inputs; its edges point at the nodes that produced those inputs (or at a leaf's
// gradient accumulator), so the recorded graph is walked from the loss back to the leaves.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::autograd {

class Node;

// Where the gradient of one forward input goes: output `input_nr` of `node`. An edge without a
// node means that input needs no gradient.
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// What a gradient must look like: the shape, dtype and device of the forward tensor.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::F32;
  Device device;
};

class Node {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // For error messages, e.g. "LinearBackward".
  virtual std::string_view name() const = 0;

  // Given one gradient per forward output (never undefined: the engine passes zeros for outputs
  // that received none), returns one gradient per forward input (next_edges order). An entry may
  // be undefined where needs_input_grad(i) is false.
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) = 0;

  // Optional fast path for a node with one input whose gradient is a sparse update (an
  // embedding's scatter-add): adds the input's gradient into `into`, a gradient of the input's
  // shape and dtype that another consumer already delivered and that only the engine holds,
  // instead of returning a dense gradient for the engine to add. Returns false (the default) when
  // it cannot; the engine then calls apply().
  virtual bool apply_accumulate(std::vector<Tensor>& grad_outputs, Tensor& into) { return false; }

  // Drops what the node saved for backward; called after apply() unless the graph is retained.
  virtual void release_saved() {}
  // Accumulators are shared between graphs and never released.
  virtual bool releasable() const { return true; }

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].valid(); }

  size_t num_outputs() const { return outputs_.size(); }
  const TensorMeta& output_meta(size_t i) const { return outputs_[i]; }
  void add_output(const Tensor& t) { outputs_.push_back({t.shape(), t.dtype(), t.device()}); }

  // Creation order; the engine runs ready nodes latest-first, so gradients of late layers are
  // finished (and their hooks fire) before those of early layers.
  uint64_t sequence_nr() const { return sequence_nr_; }

  bool released() const { return released_; }
  void mark_released() { released_ = true; }

  // The scope (autograd/scope.h) that was current when the node was recorded; the engine makes
  // it current again while the node runs, so backward work is attributed to the forward module
  // that caused it. -1: none.
  int64_t scope() const { return scope_; }
  void set_scope(int64_t scope) { scope_ = scope; }

 protected:
  explicit Node(uint64_t sequence_nr) : sequence_nr_(sequence_nr) {}

 private:
  std::vector<Edge> next_edges_;
  std::vector<TensorMeta> outputs_;
  uint64_t sequence_nr_;
  bool released_ = false;
  int64_t scope_ = -1;
};

}  // namespace tessel::autograd
