// SPDX-License-Identifier: Apache-2.0
#include "tessel/kernels/bf16_gemm_path.h"

#include "tessel/kernels/cpu/gemm_onednn.h"

namespace tessel::kernels {

bool cpu_bf16_gemm_widens(int64_t rows) {
  return !onednn::bf16_gemm_native(rows);
}

}  // namespace tessel::kernels
