// SPDX-License-Identifier: Apache-2.0
// What a kernel did, reported to an observer installed for the current thread. The meta backend
// (kernels/meta) reports every kernel it is asked to run, with the FLOPs and bytes a real backend
// would spend, which is how the planner's shape-only trace (plan/trace.h) measures a model; the
// tensor layer's own copies on meta tensors (tensor/meta_copy.h) arrive here too. The counting
// rules per kernel are written down in kernels/meta/meta_backend.cpp and docs/PLANNER.md.
#pragma once

#include <string_view>
#include <vector>

#include "tessel/tensor/meta_copy.h"
#include "tessel/tensor/tensor.h"

namespace tessel::kernels {

struct TensorDesc {
  Shape shape;
  DType dtype = DType::F32;
  // Which bytes: the storage (an identity only, never dereferenced; views share it), for
  // following data from the kernel that wrote it to those that read it.
  const void* storage = nullptr;
  double bytes() const { return double(shape.numel()) * double(dtype_size(dtype)); }
};

inline TensorDesc describe(const Tensor& t) {
  return {t.shape(), t.dtype(), t.storage_ptr().get()};
}

struct KernelEvent {
  std::string_view kernel;  // op_name(), or the tensor layer's "copy", "convert", "permute", ...
  std::string_view detail;  // unary / binary / reduce op name, "log" softmax, ... (may be empty)
  std::vector<TensorDesc> inputs, outputs;
  // Every floating-point operation the kernel performs (a multiply-add is two).
  double flops = 0;
  // The part of `flops` that is matrix products and that model-FLOPs (MFU) formulas count: GEMMs
  // and attention's score and weighted-sum products with their gradients (not the scores a
  // flash-style backward recomputes, which are in `flops` only).
  double matmul_flops = 0;
  double bytes_read = 0, bytes_written = 0;
};

class KernelObserver {
 public:
  virtual ~KernelObserver() = default;
  virtual void on_kernel(const KernelEvent& event) = 0;
};

// Installs `observer` for this thread (and forwards the tensor layer's meta copies to it);
// restores the previous observer when it ends. Scopes nest, the innermost observer alone sees
// the events.
class KernelObserverScope {
 public:
  explicit KernelObserverScope(KernelObserver& observer);
  ~KernelObserverScope();
  KernelObserverScope(const KernelObserverScope&) = delete;
  KernelObserverScope& operator=(const KernelObserverScope&) = delete;

 private:
  KernelObserver* previous_;
  MetaCopyObserver previous_copy_observer_;
};

// The observer of this thread, or null.
KernelObserver* current_kernel_observer();
// Sends `event` to the current observer, if any.
void report_kernel(const KernelEvent& event);

}  // namespace tessel::kernels
