// SPDX-License-Identifier: Apache-2.0
// The autograd state a Tensor carries (its grad_fn, or for a leaf its gradient accumulator and
// grad-ready hooks), and the small API ops use to record themselves on the tape:
//   if (autograd::needs_grad({x, w})) { auto node = ...; autograd::record(node, {x, w}, {y}); }
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "tessel/autograd/node.h"

namespace tessel::autograd {

// Called with the leaf once its gradient for the current backward is complete (accumulated into
// leaf.grad()). Data-parallel gradient communication starts from here.
using GradReadyHook = std::function<void(const Tensor& leaf)>;

struct AutogradMeta final : AutogradMetaBase {
  std::shared_ptr<Node> grad_fn;  // null for a leaf
  int output_nr = 0;              // which output of grad_fn this tensor is
  // A leaf's accumulator, shared by every graph that uses the leaf while any of them lives; held
  // weakly so that a leaf does not keep a graph alive.
  std::weak_ptr<Node> grad_accumulator;
  std::vector<std::pair<int64_t, GradReadyHook>> grad_ready_hooks;
};

// The tensor's autograd state, or null when it has none.
AutogradMeta* autograd_meta(const Tensor& t);
std::shared_ptr<Node> grad_fn(const Tensor& t);
// A tensor that requires grad and was not produced by a recorded op.
bool is_leaf(const Tensor& t);

// True when grad mode is on and any defined input requires grad: the op must record a node.
bool needs_grad(std::span<const Tensor> inputs);
inline bool needs_grad(std::initializer_list<Tensor> inputs) {
  return needs_grad(std::span<const Tensor>(inputs.begin(), inputs.size()));
}

// Where the gradient of `t` must be sent: its grad_fn, or its accumulator when it is a leaf;
// an invalid edge when it does not require grad.
Edge gradient_edge(const Tensor& t);

// Connects `node` to the tape: its edges point at the inputs' gradient edges, and every
// floating output (fresh tensors made by the op) gets `node` as its grad_fn.
void record(const std::shared_ptr<Node>& node, std::span<const Tensor> inputs,
            std::span<const Tensor> outputs);
inline void record(const std::shared_ptr<Node>& node, std::initializer_list<Tensor> inputs,
                   std::initializer_list<Tensor> outputs) {
  record(node, std::span<const Tensor>(inputs.begin(), inputs.size()),
         std::span<const Tensor>(outputs.begin(), outputs.size()));
}

// What a node keeps for backward: the same bytes without autograd state (holding the tensor
// itself would make output -> grad_fn -> saved output a reference cycle). Undefined stays
// undefined. Tensors are not versioned: modifying a saved tensor in place before backward
// silently changes the gradient.
Tensor saved(const Tensor& t);

// Registers `hook` on a leaf (a tensor that requires grad and has no grad_fn); it fires once per
// backward that reaches the leaf, right after the leaf's last contribution was accumulated.
// Returns a handle for remove_grad_ready_hook.
int64_t register_grad_ready_hook(const Tensor& leaf, GradReadyHook hook);
void remove_grad_ready_hook(const Tensor& leaf, int64_t handle);

// a + b as a new tensor (both gradients of the same tensor).
Tensor add_gradients(const Tensor& a, const Tensor& b);
// a += b in place; for a gradient buffer nobody else can see (exclusively_owned).
void add_gradients_into(Tensor& a, const Tensor& b);
// Whether nobody but the caller holds g or its bytes, so it may be written in place or become
// leaf.grad() without a copy.
bool exclusively_owned(const Tensor& g);

}  // namespace tessel::autograd
