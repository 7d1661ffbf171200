// SPDX-License-Identifier: Apache-2.0
// The plain-FMA attention kernels (kernels/cuda/attention/attention_simple.cu: the f32 path, head
// dims off the tensor-core tiles, the deterministic backward), their real source and launch
// code, run on the CPU through warp_emulation.h against the fp64 reference.
#include "kernels/cuda/warp_emulation.h"
// The kernel source itself, after the emulation.
#include "tessel/kernels/cuda/attention/attention_simple.cu"
//
#include <gtest/gtest.h>

#include "kernels/cuda/emulation_cases.h"

namespace tessel::gpu_test {
namespace {

std::vector<EmulatedCase> plain_cases() {
  return {
      {1, 13, 13, 4, 2, 40, true, 0, true},
      {2, 7, 33, 2, 1, 64, true, 5, false},
      {1, 33, 7, 2, 2, 24, true, 0, false},  // rows that see no key
      {1, 33, 33, 4, 1, 64, false, 0, true},
  };
}

TEST(CudaAttentionEmulation, PlainForwardAndBackwardMatchTheReference) {
  uint64_t seed = 200;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (const EmulatedCase& c : plain_cases()) {
      EmulatedProblem p(c, dtype, seed++);
      const auto type = attn_type(dtype);
      Tensor out = empty(p.q.shape(), dtype), lse = empty(p.lse.shape(), DType::F32);
      kernels::cuda::detail::simple_forward(p.dims, type, p.q.data_ptr(), p.k.data_ptr(),
                                            p.v.data_ptr(), p.mask_ptr(), out.data_ptr(),
                                            lse.data<float>(), nullptr);
      EXPECT_LE(nmse(out, p.out), out_bound(dtype)) << case_name(c, dtype);
      EXPECT_LE(nmse(lse, p.lse), 1e-9) << case_name(c, dtype);

      std::vector<float> rowdot(size_t(c.batch * c.heads * c.tq));
      Tensor dq = empty(p.q.shape(), dtype), dk = empty(p.k.shape(), dtype),
             dv = empty(p.v.shape(), dtype);
      kernels::cuda::detail::simple_backward(p.dims, type, p.q.data_ptr(), p.k.data_ptr(),
                                             p.v.data_ptr(), p.mask_ptr(), out.data_ptr(),
                                             lse.data<float>(), p.dout.data_ptr(), dq.data_ptr(),
                                             dk.data_ptr(), dv.data_ptr(), rowdot.data(), nullptr);
      EXPECT_LE(nmse(dq, p.dq), grad_bound(dtype)) << case_name(c, dtype) << " dq";
      EXPECT_LE(nmse(dk, p.dk), grad_bound(dtype)) << case_name(c, dtype) << " dk";
      EXPECT_LE(nmse(dv, p.dv), grad_bound(dtype)) << case_name(c, dtype) << " dv";
    }
}

}  // namespace
}  // namespace tessel::gpu_test
