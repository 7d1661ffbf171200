// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's wiring, checked without a GPU: which ops and dtypes it claims (the GPU test
// runs exactly the op-harness cases of those, so each wired op must have some), and the mapping of
// the Backend's attention descriptors and dtypes onto the launchers' (attention/attention.h).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "kernels/op_harness.h"
#include "tessel/kernels/cuda/cuda_attention_adapter.h"
#include "tessel/kernels/cuda/cuda_backend_instance.h"

namespace tessel {
namespace {

using kernels::Op;

constexpr DType kFloats[] = {DType::F64, DType::F32, DType::BF16, DType::F16};

// What the launchers of kernels/cuda/ take (docs/KERNELS.md, "CudaBackend").
std::set<DType> expected_dtypes(Op op) {
  switch (op) {
    case Op::Gemm:
      return {DType::F64, DType::F32, DType::BF16, DType::F16};
    case Op::AdamW:
      return {DType::F32};
    case Op::QuantMatmul:
    case Op::GroupedGemm:
      return {};
    default:
      return {DType::F32, DType::BF16, DType::F16};
  }
}

TEST(CudaBackendWiring, SupportsExactlyTheWiredOpsAndDtypes) {
  for (int i = 0; i <= int(Op::GroupedGemm); ++i) {
    const Op op = Op(i);
    const std::set<DType> want = expected_dtypes(op);
    for (DType dt : kFloats)
      EXPECT_EQ(kernels::cuda_supports(op, dt), want.count(dt) == 1)
          << kernels::op_name(op) << " " << dtype_name(dt);
    for (DType dt : {DType::I8, DType::I32, DType::I64})
      EXPECT_FALSE(kernels::cuda_supports(op, dt)) << kernels::op_name(op) << " " << dtype_name(dt);
  }
}

// The GPU test checks an adapter only through the op-harness cases of its op: every supported
// (op, dtype) must have at least one, or that adapter would ship unchecked.
TEST(CudaBackendWiring, EverySupportedOpAndDtypeHasOpHarnessCases) {
  std::map<std::pair<Op, DType>, int> cases;
  for (const testing::OpCase& c : testing::all_op_cases()) ++cases[{c.op, c.dtype}];
  int enlisted = 0;
  for (int i = 0; i <= int(Op::GroupedGemm); ++i)
    for (DType dt : kFloats) {
      if (!kernels::cuda_supports(Op(i), dt)) continue;
      const int n = cases[{Op(i), dt}];
      EXPECT_GT(n, 0) << kernels::op_name(Op(i)) << " " << dtype_name(dt);
      enlisted += n;
    }
  std::printf("op-harness cases the GPU test runs: %d\n", enlisted);
}

TEST(CudaBackendWiring, AttentionDescMapsFieldForField) {
  kernels::AttentionDesc d;
  d.batch = 3, d.q_len = 5, d.kv_len = 7, d.heads = 8, d.kv_heads = 2, d.head_dim = 40;
  d.causal = false, d.scale = 0.125, d.window = 11;
  const kernels::cuda::AttentionDims a = kernels::cuda::attention_dims(d);
  EXPECT_EQ(a.batch, 3);
  EXPECT_EQ(a.q_len, 5);
  EXPECT_EQ(a.kv_len, 7);
  EXPECT_EQ(a.heads, 8);
  EXPECT_EQ(a.kv_heads, 2);
  EXPECT_EQ(a.head_dim, 40);
  EXPECT_FALSE(a.causal);
  EXPECT_EQ(a.scale, 0.125);
  EXPECT_EQ(a.window, 11);
  d.causal = true;
  EXPECT_TRUE(kernels::cuda::attention_dims(d).causal);
}

TEST(CudaBackendWiring, PagedDimsKeepTheDescriptorsScaleAndWindow) {
  kernels::PagedAttentionDesc desc;
  desc.scale = 0.25, desc.window = 9;
  const kernels::cuda::PagedDims p = kernels::cuda::paged_dims(13, 8, 2, 64, 16, 3, 5, desc);
  EXPECT_EQ(p.tokens, 13);
  EXPECT_EQ(p.heads, 8);
  EXPECT_EQ(p.kv_heads, 2);
  EXPECT_EQ(p.head_dim, 64);
  EXPECT_EQ(p.block_size, 16);
  EXPECT_EQ(p.sequences, 3);
  EXPECT_EQ(p.max_blocks, 5);
  EXPECT_EQ(p.scale, 0.25);
  EXPECT_EQ(p.window, 9);
}

TEST(CudaBackendWiring, AttentionTypesAreTheFloatDtypesTheLaunchersTake) {
  using kernels::cuda::AttnType;
  EXPECT_EQ(kernels::cuda::attn_type("attention", DType::F32), AttnType::F32);
  EXPECT_EQ(kernels::cuda::attn_type("attention", DType::BF16), AttnType::BF16);
  EXPECT_EQ(kernels::cuda::attn_type("attention", DType::F16), AttnType::F16);
  try {
    kernels::cuda::attn_type("paged_attention", DType::F64);
    ADD_FAILURE() << "f64 should be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("paged_attention"), std::string::npos) << what;
    EXPECT_NE(what.find("f64"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace tessel
