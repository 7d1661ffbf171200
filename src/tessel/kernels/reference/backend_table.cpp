// SPDX-License-Identifier: Apache-2.0
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

bool ReferenceBackend::supports(Op op, DType dtype) const {
  return dtype == DType::F64;
}

Backend& reference_backend() {
  static ReferenceBackend backend;
  return backend;
}

}  // namespace tessel::kernels
