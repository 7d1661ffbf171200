// SPDX-License-Identifier: Apache-2.0
// The thread-local scope tag and saved-tensor observer behind autograd/scope.h.
#include "tessel/autograd/scope.h"

namespace tessel::autograd {

namespace {
thread_local int64_t t_scope = -1;
thread_local SavedTensorObserver* t_saved_observer = nullptr;
}  // namespace

int64_t current_scope() {
  return t_scope;
}

int64_t exchange_scope(int64_t scope) {
  int64_t previous = t_scope;
  t_scope = scope;
  return previous;
}

SavedTensorObserverScope::SavedTensorObserverScope(SavedTensorObserver observer)
    : observer_(std::move(observer)), previous_(t_saved_observer) {
  t_saved_observer = &observer_;
}

SavedTensorObserverScope::~SavedTensorObserverScope() {
  t_saved_observer = previous_;
}

void notify_saved(const Tensor& t) {
  if (t_saved_observer != nullptr && t.defined()) (*t_saved_observer)(t);
}

}  // namespace tessel::autograd
