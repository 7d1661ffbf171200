// SPDX-License-Identifier: Apache-2.0
// The tensor layer's own data movement on meta tensors (copies, conversions, fills, permutes,
// joins and splits: the work that is not a kernel of the Backend) is reported here, so that a
// shape-only trace (kernels/kernel_observer.h forwards these events) counts its bytes too. Only
// meta tensors are reported; CPU tensors never reach this.
#pragma once

#include <span>
#include <string_view>

#include "tessel/tensor/tensor.h"

namespace tessel {

// `what`: "copy", "convert", "fill", "permute", "concat", "split". Inputs are read in full,
// outputs written in full.
using MetaCopyObserver = void (*)(std::string_view what, std::span<const Tensor> inputs,
                                  std::span<const Tensor> outputs);

// Installs `observer` for this thread (nullptr: none); returns the previous one.
MetaCopyObserver exchange_meta_copy_observer(MetaCopyObserver observer);

// Calls the observer of this thread, if any.
void report_meta_copy(std::string_view what, std::span<const Tensor> inputs,
                      std::span<const Tensor> outputs);
inline void report_meta_copy(std::string_view what, std::initializer_list<Tensor> inputs,
                             std::initializer_list<Tensor> outputs) {
  report_meta_copy(what, std::span<const Tensor>(inputs.begin(), inputs.size()),
                   std::span<const Tensor>(outputs.begin(), outputs.size()));
}

}  // namespace tessel
