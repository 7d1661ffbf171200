// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::attention(const AttentionDesc& desc, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& mask, Tensor& out, Tensor& lse) {
  TESSEL_FAIL("reference attention: not implemented yet");
}

void ReferenceBackend::attention_backward(const AttentionDesc& desc, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& mask, const Tensor& out, const Tensor& lse,
                          const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  TESSEL_FAIL("reference attention_backward: not implemented yet");
}

}  // namespace tessel::kernels
