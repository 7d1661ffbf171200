// SPDX-License-Identifier: Apache-2.0
// Attribution hooks for tools that watch a forward and backward pass from outside (the planner's
// trace, a profiler): a thread-local "current scope" tag that every recorded node remembers and
// the engine restores while the node runs backward (as PyTorch's profiler ties backward work to
// the forward op's sequence number), and an observer of the tensors nodes save for backward.
// Nothing here changes what autograd computes.
#pragma once

#include <cstdint>
#include <functional>

#include "tessel/tensor/tensor.h"

namespace tessel::autograd {

// The tag of this thread's current scope (-1: none). The caller defines what a tag means.
int64_t current_scope();
// Makes `scope` current and returns the previous one (for hooks that cannot use ScopeGuard).
int64_t exchange_scope(int64_t scope);

class ScopeGuard {
 public:
  explicit ScopeGuard(int64_t scope) : previous_(exchange_scope(scope)) {}
  ~ScopeGuard() { exchange_scope(previous_); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  int64_t previous_;
};

// Receives every tensor an op keeps for backward (through autograd::saved) on this thread, before
// its autograd state is stripped. Scopes nest; the innermost observer alone is called.
using SavedTensorObserver = std::function<void(const Tensor& saved)>;

class SavedTensorObserverScope {
 public:
  explicit SavedTensorObserverScope(SavedTensorObserver observer);
  ~SavedTensorObserverScope();
  SavedTensorObserverScope(const SavedTensorObserverScope&) = delete;
  SavedTensorObserverScope& operator=(const SavedTensorObserverScope&) = delete;

 private:
  SavedTensorObserver observer_;
  SavedTensorObserver* previous_;
};

// Calls the current observer, if any (autograd::saved does).
void notify_saved(const Tensor& t);

}  // namespace tessel::autograd
