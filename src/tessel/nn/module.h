// SPDX-License-Identifier: Apache-2.0
// Module: the unit models are built from. It owns named parameters, buffers and submodules in
// registration order, gives them dotted names ("h.3.attn.c_attn.weight"), saves and restores them
// as a state dict with strict checks, switches train/eval mode, runs pre/post-forward hooks, and
// reports named intermediate activations to observers for layer-by-layer comparison.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A parameter is a leaf tensor that requires grad; this marks one (and detaches it from any graph).
Tensor make_parameter(const Tensor& t);

class Module;

// Runs before forward with the module and its inputs.
using ForwardPreHook = std::function<void(Module& module, const std::vector<Tensor>& inputs)>;
// Runs after forward; may replace the output.
using ForwardHook =
    std::function<void(Module& module, const std::vector<Tensor>& inputs, Tensor& output)>;
// Replaces a module's own forward computation (its parameters stay registered as they are): how
// parallel styles change what a layer computes without changing the model's code.
using ForwardOverride = std::function<Tensor(Module& module, const std::vector<Tensor>& inputs)>;
// Receives every named intermediate ("h.0.ln_1", "h.0.attn.q", ...) of the subtree it observes.
using ActivationObserver = std::function<void(const std::string& name, const Tensor& value)>;

class Module {
 public:
  explicit Module(std::string type_name);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }
  // Dotted name from the root of the tree this module is registered in ("" for the root).
  std::string path() const;

  // --- registration (names are unique per module and contain no '.') ---
  Tensor register_parameter(const std::string& name, const Tensor& value);
  Tensor register_buffer(const std::string& name, const Tensor& value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // --- traversal, in registration order, parameters of a module before its children's ---
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  std::vector<std::pair<std::string, Module*>> named_modules();  // includes this one as ""
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }
  int64_t parameter_count() const;
  // The parameter or buffer with this dotted name; an Error names the module and the name.
  Tensor find(const std::string& dotted_name) const;

  // --- state dict: parameters then buffers, by dotted name ---
  NamedTensors state_dict() const;
  // Copies values in place (parameters keep their identity; dtypes convert). With `strict`, a
  // single Error lists every missing, unexpected and mis-shaped name; without it, missing and
  // unexpected names are skipped but shapes must still match.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // --- modes ---
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Converts every parameter and buffer to `dtype` in place (handles stay valid).
  void to(DType dtype);
  void zero_grad();

  // --- hooks (handles are unique per module) ---
  int64_t register_forward_pre_hook(ForwardPreHook hook);
  int64_t register_forward_hook(ForwardHook hook);
  int64_t add_activation_observer(ActivationObserver observer);
  void remove_hook(int64_t handle);
  // Runs `fn` instead of the module's forward body, between the pre- and post-hooks; an empty
  // function restores the body. One override per module: a second one is an Error.
  void set_forward_override(ForwardOverride fn);
  bool has_forward_override() const { return static_cast<bool>(override_); }

 protected:
  // Runs pre-hooks, body(), post-hooks, then reports the output under this module's path.
  Tensor run_forward(const std::vector<Tensor>& inputs, const std::function<Tensor()>& body);
  // Reports an intermediate as "<path>.<what>" to the observers of this module and its ancestors.
  void tap(const std::string& what, const Tensor& value) const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, NamedTensors& out, bool params) const;
  void report(const std::string& name, const Tensor& value) const;

  std::string type_name_;
  Module* parent_ = nullptr;
  std::string local_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  int64_t next_handle_ = 1;
  std::vector<std::pair<int64_t, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int64_t, ForwardHook>> post_hooks_;
  std::vector<std::pair<int64_t, ActivationObserver>> observers_;
  ForwardOverride override_;
};

// Submodules named "0", "1", ... in order (GPT-2's "h.N" blocks).
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <typename M>
  std::shared_ptr<M> append(std::shared_ptr<M> module) {
    return register_module(std::to_string(children().size()), std::move(module));
  }
  size_t size() const { return children().size(); }
};

// Throws one Error listing every missing, unexpected and mis-shaped tensor name, prefixed with
// `context`; returns when all three lists are empty. Shared by load_state_dict and the checkpoint
// loaders, so every loader reports a mismatch the same way.
void check_state_names(const std::string& context, const std::vector<std::string>& missing,
                       const std::vector<std::string>& unexpected,
                       const std::vector<std::string>& mismatched);

}  // namespace tessel::nn
