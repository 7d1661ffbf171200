// SPDX-License-Identifier: Apache-2.0
// The tensor-core attention backward (kernels/cuda/attention/flash_backward.cu), its real source
// and launch code, run on the CPU through warp_emulation.h against the fp64 reference, from the
// reference's out and lse: bf16 and f16, odd sizes, GQA, causal offsets, windows, padding.
#include "kernels/cuda/warp_emulation.h"
// The kernel source itself, after the emulation.
#include "tessel/kernels/cuda/attention/flash_backward.cu"
//
#include <gtest/gtest.h>

#include "kernels/cuda/emulation_cases.h"

namespace tessel::gpu_test {
namespace {

TEST(CudaAttentionEmulation, BackwardMatchesTheReference) {
  uint64_t seed = 100;
  for (DType dtype : {DType::BF16, DType::F16})
    for (const EmulatedCase& c : emulated_cases()) {
      EmulatedProblem p(c, dtype, seed++);
      const double bound = grad_bound(dtype);
      std::vector<float> ws(kernels::cuda::detail::flash_backward_workspace_floats(p.dims));
      Tensor dq = empty(p.q.shape(), dtype), dk = empty(p.k.shape(), dtype),
             dv = empty(p.v.shape(), dtype);
      kernels::cuda::detail::flash_backward(
          p.dims, attn_type(dtype), p.q.data_ptr(), p.k.data_ptr(), p.v.data_ptr(), p.mask_ptr(),
          p.out_narrow.data_ptr(), p.lse_f32.data<float>(), p.dout.data_ptr(), dq.data_ptr(),
          dk.data_ptr(), dv.data_ptr(), ws.data(), nullptr);
      EXPECT_LE(nmse(dq, p.dq), bound) << case_name(c, dtype) << " dq";
      EXPECT_LE(nmse(dk, p.dk), bound) << case_name(c, dtype) << " dk";
      EXPECT_LE(nmse(dv, p.dv), bound) << case_name(c, dtype) << " dv";
    }
}

}  // namespace
}  // namespace tessel::gpu_test
