// SPDX-License-Identifier: Apache-2.0
// The tensor-core attention forward (kernels/cuda/attention/flash_forward.cu), its real source
// and launch code, run on the CPU through warp_emulation.h against the fp64 reference: bf16 and
// f16, odd sizes, GQA, causal offsets, sliding windows, padding.
#include "kernels/cuda/warp_emulation.h"
// The kernel source itself, after the emulation.
#include "tessel/kernels/cuda/attention/flash_forward.cu"
//
#include <gtest/gtest.h>

#include "kernels/cuda/emulation_cases.h"

namespace tessel::gpu_test {
namespace {

TEST(CudaAttentionEmulation, ForwardMatchesTheReference) {
  uint64_t seed = 1;
  for (DType dtype : {DType::BF16, DType::F16})
    for (const EmulatedCase& c : emulated_cases()) {
      EmulatedProblem p(c, dtype, seed++);
      const double bound = out_bound(dtype);
      ASSERT_TRUE(kernels::cuda::detail::flash_supported(p.dims, attn_type(dtype), {}));
      Tensor out = empty(p.q.shape(), dtype), lse = empty(p.lse.shape(), DType::F32);
      kernels::cuda::detail::flash_forward(p.dims, attn_type(dtype), p.q.data_ptr(), p.k.data_ptr(),
                                           p.v.data_ptr(), p.mask_ptr(), out.data_ptr(),
                                           lse.data<float>(), nullptr);
      EXPECT_LE(nmse(out, p.out), bound) << case_name(c, dtype);
      EXPECT_LE(nmse(lse, p.lse), 1e-9) << case_name(c, dtype);
    }
}

}  // namespace
}  // namespace tessel::gpu_test
