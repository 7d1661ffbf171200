// SPDX-License-Identifier: Apache-2.0
// The thread-local kernel observer, and the bridge that turns the tensor layer's meta copies into
// kernel events (a copy moves bytes and computes nothing).
#include "tessel/kernels/kernel_observer.h"

namespace tessel::kernels {

namespace {

thread_local KernelObserver* t_observer = nullptr;

void forward_copy(std::string_view what, std::span<const Tensor> inputs,
                  std::span<const Tensor> outputs) {
  KernelEvent e;
  e.kernel = what;
  for (const Tensor& t : inputs) {
    e.inputs.push_back(describe(t));
    e.bytes_read += double(t.nbytes());
  }
  for (const Tensor& t : outputs) {
    e.outputs.push_back(describe(t));
    e.bytes_written += double(t.nbytes());
  }
  report_kernel(e);
}

}  // namespace

KernelObserverScope::KernelObserverScope(KernelObserver& observer)
    : previous_(t_observer), previous_copy_observer_(exchange_meta_copy_observer(forward_copy)) {
  t_observer = &observer;
}

KernelObserverScope::~KernelObserverScope() {
  t_observer = previous_;
  exchange_meta_copy_observer(previous_copy_observer_);
}

KernelObserver* current_kernel_observer() {
  return t_observer;
}

void report_kernel(const KernelEvent& event) {
  if (t_observer != nullptr) t_observer->on_kernel(event);
}

}  // namespace tessel::kernels
