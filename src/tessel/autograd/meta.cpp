// SPDX-License-Identifier: Apache-2.0
// Autograd state on tensors, recording of nodes, and AccumulateGrad: the node at the end of every
// path to a leaf, which adds the leaf's gradient into leaf.grad() and fires its grad-ready hooks.
#include "tessel/autograd/meta.h"

#include <atomic>
#include <limits>

#include "tessel/autograd/backend_scope.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/scope.h"

namespace tessel::autograd {

namespace {

std::atomic<int64_t> g_next_hook_handle{1};

AutogradMeta& ensure_meta(const Tensor& t) {
  if (AutogradMeta* m = autograd_meta(t)) return *m;
  Tensor handle = t;
  auto meta = std::make_shared<AutogradMeta>();
  AutogradMeta& ref = *meta;
  handle.set_autograd_meta(std::move(meta));
  return ref;
}

class AccumulateGrad final : public Node {
 public:
  // Runs as soon as it is ready (highest priority): its hooks start communication early.
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
      : Node(std::numeric_limits<uint64_t>::max()), leaf_(std::move(leaf)) {}

  std::string_view name() const override { return "AccumulateGrad"; }
  bool releasable() const override { return false; }

  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override {
    Tensor leaf(leaf_);
    Tensor g = std::move(grad_outputs[0]);
    grad_outputs.clear();
    TESSEL_CHECK(g.shape() == leaf.shape(), "AccumulateGrad: gradient of shape ", g.shape(),
                 " for a leaf of shape ", leaf.shape());
    Tensor current = leaf.grad();
    if (!current.defined()) {
      bool steal = g.dtype() == leaf.dtype() && exclusively_owned(g);
      leaf.set_grad(steal ? g : g.to(leaf.dtype()).clone());
    } else {
      TESSEL_CHECK(current.shape() == leaf.shape(), "AccumulateGrad: existing grad of shape ",
                   current.shape(), " for a leaf of shape ", leaf.shape());
      // In place: leaf.grad() may be a view into a communication bucket that others hold. The
      // kernel writes the sum over its first operand (the same arithmetic, so the same bits, as
      // a sum into a new tensor copied back, without the second pass or the allocation).
      Tensor addend = g.dtype() == current.dtype() ? g : g.to(current.dtype());
      add_gradients_into(current, addend);
    }
    if (AutogradMeta* m = autograd_meta(leaf)) {
      auto hooks = m->grad_ready_hooks;  // a hook may register or remove hooks
      for (auto& [handle, hook] : hooks) hook(leaf);
    }
    return {};
  }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& m = ensure_meta(leaf);
  if (auto acc = m.grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
  acc->add_output(leaf);
  acc->set_scope(current_scope());  // the module that first uses the leaf
  m.grad_accumulator = acc;
  return acc;
}

}  // namespace

AutogradMeta* autograd_meta(const Tensor& t) {
  AutogradMetaBase* base = t.autograd_meta();
  if (base == nullptr) return nullptr;
  auto* m = dynamic_cast<AutogradMeta*>(base);
  TESSEL_CHECK(m != nullptr, "autograd: tensor", t.name().empty() ? "" : " '" + t.name() + "'",
               " carries autograd state of an unknown kind");
  return m;
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  AutogradMeta* m = t.defined() ? autograd_meta(t) : nullptr;
  return m ? m->grad_fn : nullptr;
}

bool is_leaf(const Tensor& t) {
  return t.requires_grad() && grad_fn(t) == nullptr;
}

bool needs_grad(std::span<const Tensor> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (AutogradMeta* m = autograd_meta(t); m && m->grad_fn) return {m->grad_fn, m->output_nr};
  return {grad_accumulator(t), 0};
}

void record(const std::shared_ptr<Node>& node, std::span<const Tensor> inputs,
            std::span<const Tensor> outputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) edges.push_back(gradient_edge(t));
  node->set_next_edges(std::move(edges));
  node->set_scope(current_scope());
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor out = outputs[i];
    node->add_output(out);
    if (!dtype_is_float(out.dtype())) continue;
    TESSEL_CHECK(out.autograd_meta() == nullptr && !out.requires_grad(), "autograd: output ", i,
                 " of ", node->name(),
                 " already belongs to a graph (an op must return fresh tensors)");
    auto meta = std::make_shared<AutogradMeta>();
    meta->grad_fn = node;
    meta->output_nr = int(i);
    out.set_autograd_meta(std::move(meta));
    out.set_requires_grad(true);
  }
}

Tensor saved(const Tensor& t) {
  if (!t.defined()) return Tensor();
  notify_saved(t);
  return t.detach();
}

int64_t register_grad_ready_hook(const Tensor& leaf, GradReadyHook hook) {
  TESSEL_CHECK(leaf.defined() && is_leaf(leaf), "register_grad_ready_hook: tensor",
               leaf.defined() && !leaf.name().empty() ? " '" + leaf.name() + "'" : "",
               " is not a leaf that requires grad");
  int64_t handle = g_next_hook_handle.fetch_add(1);
  ensure_meta(leaf).grad_ready_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void remove_grad_ready_hook(const Tensor& leaf, int64_t handle) {
  AutogradMeta* m = autograd_meta(leaf);
  TESSEL_CHECK(m != nullptr, "remove_grad_ready_hook: tensor has no hooks");
  auto& hooks = m->grad_ready_hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    if (it->first == handle) {
      hooks.erase(it);
      return;
    }
  }
  TESSEL_FAIL("remove_grad_ready_hook: no hook with handle ", handle, " on this tensor");
}

bool exclusively_owned(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.storage_ptr().use_count() == 1;
}

void add_gradients_into(Tensor& a, const Tensor& b) {
  TESSEL_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), "autograd: cannot add gradient ",
               b.shape(), " ", dtype_name(b.dtype()), " into ", a.shape(), " ",
               dtype_name(a.dtype()));
  backend_for(a.device()).binary(kernels::BinaryOp::Add, a, b, a);
}

Tensor add_gradients(const Tensor& a, const Tensor& b) {
  TESSEL_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), "autograd: cannot add gradients ",
               a.shape(), " ", dtype_name(a.dtype()), " and ", b.shape(), " ",
               dtype_name(b.dtype()));
  Tensor out = empty(a.shape(), a.dtype(), a.device());
  backend_for(a.device()).binary(kernels::BinaryOp::Add, a, b, out);
  return out;
}

}  // namespace tessel::autograd
