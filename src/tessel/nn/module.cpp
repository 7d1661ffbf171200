// SPDX-License-Identifier: Apache-2.0
// Module bookkeeping: registration, dotted-name traversal, strict state-dict loading, modes, hooks
// and activation observers.
#include "tessel/nn/module.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <sstream>

#include "tessel/autograd/grad_mode.h"

namespace tessel::nn {

namespace {

// Observers registered anywhere; lets tap() return at once in the common case of none.
std::atomic<int64_t> g_observer_count{0};

std::string join(const std::string& prefix, const std::string& name) {
  if (name.empty()) return prefix;  // a child's own path ("") is the child's name
  return prefix.empty() ? name : prefix + "." + name;
}

template <typename T>
void erase_handle(std::vector<std::pair<int64_t, T>>& v, int64_t handle, bool& found) {
  auto it = std::find_if(v.begin(), v.end(), [&](const auto& p) { return p.first == handle; });
  if (it != v.end()) {
    v.erase(it);
    found = true;
  }
}

}  // namespace

Tensor make_parameter(const Tensor& t) {
  TESSEL_CHECK(t.defined(), "make_parameter: undefined tensor");
  TESSEL_CHECK(dtype_is_float(t.dtype()), "make_parameter: parameters must be floating point, got ",
               dtype_name(t.dtype()));
  Tensor p = t.detach();
  p.set_requires_grad(true);
  return p;
}

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Module::~Module() {
  for (auto& [name, child] : children_) {
    if (child && child->parent_ == this) child->parent_ = nullptr;
  }
  g_observer_count.fetch_sub(int64_t(observers_.size()), std::memory_order_relaxed);
}

std::string Module::path() const {
  std::vector<const Module*> chain;
  for (const Module* m = this; m->parent_ != nullptr; m = m->parent_) chain.push_back(m);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) out = join(out, (*it)->local_name_);
  return out;
}

void Module::check_new_name(const std::string& name) const {
  TESSEL_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_, ": name '", name,
               "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
  };
  TESSEL_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_, ": name '",
               name, "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, const Tensor& value) {
  check_new_name(name);
  params_.emplace_back(name, make_parameter(value));
  return params_.back().second;
}

Tensor Module::register_buffer(const std::string& name, const Tensor& value) {
  check_new_name(name);
  TESSEL_CHECK(value.defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name);
  TESSEL_CHECK(child != nullptr, type_name_, ": submodule '", name, "' is null");
  TESSEL_CHECK(child->parent_ == nullptr, type_name_, ": submodule '", name,
               "' is already registered in another module");
  child->parent_ = this;
  child->local_name_ = name;
  child->training_ = training_;
  children_.emplace_back(name, std::move(child));
}

void Module::collect(const std::string& prefix, NamedTensors& out, bool params) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(join(prefix, name), t);
  for (const auto& [name, child] : children_) child->collect(join(prefix, name), out, params);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out, true);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", out, false);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules()) out.emplace_back(join(name, sub), m);
  }
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

Tensor Module::find(const std::string& dotted_name) const {
  for (auto& [name, t] : state_dict()) {
    if (name == dotted_name) return t;
  }
  TESSEL_FAIL(type_name_, ": no parameter or buffer named '", dotted_name, "'");
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(entry);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  std::vector<std::string> duplicates;
  for (const auto& [name, t] : state) {
    if (!given.emplace(name, &t).second) duplicates.push_back(name);
  }
  TESSEL_CHECK(duplicates.empty(), "load_state_dict: duplicate name '", duplicates.front(), "'");
  NamedTensors own = state_dict();
  std::vector<std::string> missing, mismatched, unexpected;
  std::map<std::string, bool> known;
  for (const auto& [name, t] : own) {
    known[name] = true;
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (!it->second->defined() || it->second->shape() != t.shape()) {
      std::ostringstream s;
      s << name << " (expected " << t.shape() << ", got ";
      if (it->second->defined()) {
        s << it->second->shape();
      } else {
        s << "undefined";
      }
      s << ")";
      mismatched.push_back(s.str());
    }
  }
  for (const auto& [name, t] : state) {
    if (!known.count(name)) unexpected.push_back(name);
  }
  if (!strict) {
    missing.clear();
    unexpected.clear();
  }
  check_state_names("load_state_dict (" + type_name_ + ")", missing, unexpected, mismatched);
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    auto it = given.find(name);
    if (it != given.end()) t.copy_from(*it->second);
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(DType dtype) {
  TESSEL_CHECK(dtype_is_float(dtype), type_name_, ".to: target dtype ", dtype_name(dtype),
               " is not floating point");
  auto convert = [&](Tensor& t) {
    if (t.dtype() == dtype || !dtype_is_float(t.dtype())) return;
    Tensor c = t.to(dtype);
    // Rebind the shared impl so every handle to this tensor (module members) sees the new bytes.
    TensorImpl& impl = *t.impl_ptr();
    impl.storage = c.storage_ptr();
    impl.offset = c.offset();
    impl.dtype = dtype;
    impl.grad.reset();
  };
  for (auto& [name, t] : params_) convert(t);
  for (auto& [name, t] : buffers_) convert(t);
  for (auto& [name, child] : children_) child->to(dtype);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.set_grad(Tensor());
}

int64_t Module::register_forward_pre_hook(ForwardPreHook hook) {
  pre_hooks_.emplace_back(next_handle_, std::move(hook));
  return next_handle_++;
}

int64_t Module::register_forward_hook(ForwardHook hook) {
  post_hooks_.emplace_back(next_handle_, std::move(hook));
  return next_handle_++;
}

int64_t Module::add_activation_observer(ActivationObserver observer) {
  observers_.emplace_back(next_handle_, std::move(observer));
  g_observer_count.fetch_add(1, std::memory_order_relaxed);
  return next_handle_++;
}

void Module::remove_hook(int64_t handle) {
  bool found = false;
  erase_handle(pre_hooks_, handle, found);
  erase_handle(post_hooks_, handle, found);
  size_t before = observers_.size();
  erase_handle(observers_, handle, found);
  if (observers_.size() != before) g_observer_count.fetch_sub(1, std::memory_order_relaxed);
  TESSEL_CHECK(found, type_name_, ".remove_hook: no hook with handle ", handle);
}

Tensor Module::run_forward(const std::vector<Tensor>& inputs, const std::function<Tensor()>& body) {
  for (auto& [h, hook] : pre_hooks_) hook(*this, inputs);
  Tensor out = override_ ? override_(*this, inputs) : body();
  for (auto& [h, hook] : post_hooks_) hook(*this, inputs, out);
  // path() walks to the root and builds a string: only when someone observes.
  if (parent_ != nullptr && g_observer_count.load(std::memory_order_relaxed) != 0)
    report(path(), out);
  return out;
}

void Module::set_forward_override(ForwardOverride fn) {
  TESSEL_CHECK(!fn || !override_, "Module '", path(), "' (", type_name_,
               ") already has a forward override");
  override_ = std::move(fn);
}

void Module::tap(const std::string& what, const Tensor& value) const {
  if (g_observer_count.load(std::memory_order_relaxed) == 0) return;
  report(join(path(), what), value);
}

void Module::report(const std::string& name, const Tensor& value) const {
  if (g_observer_count.load(std::memory_order_relaxed) == 0) return;
  for (const Module* m = this; m != nullptr; m = m->parent_) {
    for (auto& [h, observer] : m->observers_) observer(name, value);
  }
}

void check_state_names(const std::string& context, const std::vector<std::string>& missing,
                       const std::vector<std::string>& unexpected,
                       const std::vector<std::string>& mismatched) {
  if (missing.empty() && unexpected.empty() && mismatched.empty()) return;
  std::ostringstream msg;
  msg << context << ": ";
  // The first few of each kind name the problem; a whole model's worth (every tensor of a
  // checkpoint of another size) would make a line of kilobytes that no one reads.
  constexpr size_t kShown = 3;
  auto list = [&](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    msg << names.size() << " " << what << ": ";
    for (size_t i = 0; i < std::min(names.size(), kShown); ++i) msg << (i ? ", " : "") << names[i];
    if (names.size() > kShown) msg << " and " << names.size() - kShown << " more";
    msg << "; ";
  };
  list("missing", missing);
  list("unexpected", unexpected);
  list("mis-shaped", mismatched);
  TESSEL_FAIL(msg.str());
}

}  // namespace tessel::nn
