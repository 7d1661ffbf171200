// SPDX-License-Identifier: Apache-2.0
// The backward engine: counts, for every node reachable from the roots, how many edges lead into
// it; a node becomes ready once all of them delivered their gradient. Ready nodes run from a
// priority queue ordered by creation (latest first), which is a valid topological order and
// makes late layers finish first. The pass runs with grad mode off.
#include "tessel/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/meta.h"
#include "tessel/autograd/scope.h"

namespace tessel::autograd {

namespace {

struct ReadyNode {
  std::shared_ptr<Node> node;
  uint64_t order = 0;  // ties (accumulators) run in the order they became ready
};

struct RunsLater {
  bool operator()(const ReadyNode& a, const ReadyNode& b) const {
    if (a.node->sequence_nr() != b.node->sequence_nr())
      return a.node->sequence_nr() < b.node->sequence_nr();
    return a.order > b.order;
  }
};

void check_gradient(const Tensor& g, const TensorMeta& expected, const Node& producer, size_t i,
                    const Node& consumer) {
  TESSEL_CHECK(g.shape() == expected.shape && g.dtype() == expected.dtype,
               "backward: ", producer.name(), " returned a gradient of shape ", g.shape(), " ",
               dtype_name(g.dtype()), " for input ", i, ", but ", consumer.name(), " expects ",
               expected.shape, " ", dtype_name(expected.dtype));
}

void run_backward(const std::vector<Edge>& roots, std::vector<Tensor> root_grads,
                  bool retain_graph) {
  NoGradGuard no_grad;

  std::unordered_map<Node*, int> dependencies;
  {
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (const Edge& e : roots)
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges()) {
        if (!e.valid()) continue;
        ++dependencies[e.node.get()];
        if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      }
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto deliver = [&](const Edge& e, Tensor g) {
    std::vector<Tensor>& buffer = buffers[e.node.get()];
    if (buffer.empty()) buffer.resize(e.node->num_outputs());
    Tensor& slot = buffer[size_t(e.input_nr)];
    if (!slot.defined()) {
      slot = std::move(g);
    } else if (exclusively_owned(slot) && slot.dtype() == g.dtype() && slot.shape() == g.shape()) {
      add_gradients_into(slot, g);  // no one else sees the buffer: no new allocation
    } else {
      slot = add_gradients(slot, g);
    }
  };
  // The gradient already waiting in the buffer of `node`'s only input, when `node` may add its
  // own into it in place (see Node::apply_accumulate).
  auto accumulation_target = [&](Node& node) -> Tensor* {
    const std::vector<Edge>& edges = node.next_edges();
    if (edges.size() != 1 || !edges[0].valid()) return nullptr;
    auto it = buffers.find(edges[0].node.get());
    if (it == buffers.end()) return nullptr;
    Tensor& slot = it->second[size_t(edges[0].input_nr)];
    const TensorMeta& m = edges[0].node->output_meta(size_t(edges[0].input_nr));
    if (!slot.defined() || !exclusively_owned(slot) || slot.shape() != m.shape ||
        slot.dtype() != m.dtype)
      return nullptr;
    return &slot;
  };

  std::priority_queue<ReadyNode, std::vector<ReadyNode>, RunsLater> ready;
  uint64_t order = 0;
  for (size_t i = 0; i < roots.size(); ++i) deliver(roots[i], std::move(root_grads[i]));
  std::unordered_set<Node*> queued;
  for (const Edge& e : roots)
    if (!dependencies.contains(e.node.get()) && queued.insert(e.node.get()).second)
      ready.push({e.node, order++});

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top().node;
    ready.pop();
    ScopeGuard scope(node->scope());
    TESSEL_CHECK(!node->released(), "backward: ", node->name(),
                 " already ran in an earlier backward, which freed its saved tensors; pass "
                 "retain_graph = true to the first backward to go through the graph twice");
    std::vector<Tensor> grads;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      grads = std::move(it->second);
      buffers.erase(it);
    }
    grads.resize(node->num_outputs());
    for (size_t i = 0; i < grads.size(); ++i) {
      const TensorMeta& m = node->output_meta(i);
      if (!grads[i].defined()) grads[i] = zeros(m.shape, m.dtype, m.device);
    }

    std::vector<Tensor> input_grads;
    bool accumulated = false;
    if (Tensor* into = accumulation_target(*node))
      accumulated = node->apply_accumulate(grads, *into);
    if (accumulated)
      input_grads.resize(node->next_edges().size());
    else
      input_grads = node->apply(grads);
    grads.clear();
    if (!retain_graph && node->releasable()) {
      node->release_saved();
      node->mark_released();
    }

    const std::vector<Edge>& edges = node->next_edges();
    TESSEL_CHECK(input_grads.size() == edges.size(), "backward: ", node->name(), " returned ",
                 input_grads.size(), " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      if (input_grads[i].defined()) {
        check_gradient(input_grads[i], e.node->output_meta(size_t(e.input_nr)), *node, i, *e.node);
        deliver(e, std::move(input_grads[i]));
      }
      if (--dependencies[e.node.get()] == 0) ready.push({e.node, order++});
    }
  }
}

}  // namespace

void backward(const Tensor& root, bool retain_graph) {
  TESSEL_CHECK(root.defined() && root.numel() == 1, "backward: the root must be a single-element ",
               "tensor (a loss), got shape ", root.defined() ? root.shape().str() : "undefined",
               "; pass grad_outputs for other outputs");
  backward(std::vector<Tensor>{root}, {ones(root.shape(), root.dtype(), root.device())},
           retain_graph);
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph) {
  TESSEL_CHECK(outputs.size() == grad_outputs.size(), "backward: ", outputs.size(), " outputs but ",
               grad_outputs.size(), " gradients");
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    const Tensor& g = grad_outputs[i];
    TESSEL_CHECK(out.defined() && out.requires_grad(), "backward: output ", i,
                 " does not require grad (no recorded graph leads to it)");
    TESSEL_CHECK(
        g.defined() && g.shape() == out.shape() && g.dtype() == out.dtype(), "backward: gradient ",
        i, " is ",
        g.defined() ? g.shape().str() + " " + std::string(dtype_name(g.dtype())) : "undefined",
        ", expected ", out.shape(), " ", dtype_name(out.dtype()));
    roots.push_back(gradient_edge(out));
    grads.push_back(g);
  }
  run_backward(roots, std::move(grads), retain_graph);
}

}  // namespace tessel::autograd
