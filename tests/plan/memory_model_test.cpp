// SPDX-License-Identifier: Apache-2.0
// The memory model's arithmetic on hand-worked cases: the runtime's bucketing rule (reverse order,
// byte cap, padding to the dp size), ZeRO's terms per stage from the parameter count, Korthikanti
// et al.'s per-layer count, and the traced step peak's relations to the saved activations and the
// gradients. (The model against the allocator's measured peak: memory_model_check.py.)
#include "tessel/plan/memory_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tessel/models/family.h"
#include "tessel/tensor/meta_allocator.h"

namespace tessel::plan {
namespace {

models::ConfigPtr tiny_gpt2() {
  return models::family_named("gpt2").preset("tiny");
}

TEST(MemoryModel, BucketsFollowTheRuntimeRule) {
  const std::vector<std::pair<std::string, int64_t>> params = {
      {"a", 7}, {"b", 13}, {"c", 33}, {"d", 5}};
  // Cap 160 bytes: d (20) + c (132) = 152 fit; b (52) would pass it, so b and a (28) start anew.
  const auto padded = plan_buckets(params, 3, 160, true);
  ASSERT_EQ(padded.size(), 2u);
  EXPECT_EQ(padded[0].params, (std::vector<std::string>{"d", "c"}));
  EXPECT_EQ(padded[0].numel, 38);
  EXPECT_EQ(padded[0].padded, 39);  // a multiple of 3
  EXPECT_EQ(padded[1].params, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(padded[1].numel, 20);
  EXPECT_EQ(padded[1].padded, 21);
  const auto flat = plan_buckets(params, 3, 160, false);
  EXPECT_EQ(flat[0].padded, 38);  // all-reduce keeps unpadded buffers
  // A parameter above the cap gets a bucket of its own.
  const auto alone = plan_buckets(params, 2, 8, true);
  ASSERT_EQ(alone.size(), 4u);
  EXPECT_EQ(alone[1].params, (std::vector<std::string>{"c"}));
  EXPECT_EQ(alone[1].padded, 34);
  EXPECT_THROW(plan_buckets(params, 0, 160, true), Error);
}

TEST(MemoryModel, KorthikantiCount) {
  const int64_t s = 13, b = 3, h = 33, a = 3;
  const double sbh = 13.0 * 3 * 33;
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, nn::Recompute::None),
                   34 * sbh + 5.0 * a * s * s * b);
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, nn::Recompute::Selective), 34 * sbh);
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, nn::Recompute::Full), 2 * sbh);
}

TEST(MemoryModel, ZeroStagesPartitionTheState) {
  const auto config = tiny_gpt2();
  const double psi = double(config->parameter_count());
  MemoryLayout layout;
  layout.micro_batch = 3;
  layout.seq = 13;
  layout.dp = 3;
  layout.bucket_bytes = int64_t(1) << 30;  // one bucket: padded to a multiple of 3
  const double padded = std::ceil(psi / 3) * 3;
  layout.zero_stage = 0;
  MemoryEstimate m = estimate_memory(*config, layout);
  EXPECT_EQ(double(m.parameter_count), psi);
  EXPECT_EQ(m.param_bytes, 4 * psi);
  EXPECT_EQ(m.grad_bytes, 4 * psi);
  EXPECT_EQ(m.optimizer_bytes, 8 * psi);
  EXPECT_EQ(m.comm_bytes, 0);
  layout.zero_stage = 1;
  m = estimate_memory(*config, layout);
  EXPECT_EQ(m.grad_bytes, 4 * psi);
  EXPECT_EQ(m.optimizer_bytes, 8 * padded / 3);
  EXPECT_EQ(m.comm_bytes, 4 * padded);
  layout.zero_stage = 2;
  m = estimate_memory(*config, layout);
  EXPECT_EQ(m.grad_bytes, 4 * padded / 3);
  EXPECT_EQ(m.gradient_buffer_bytes, 0);  // in the traced peak
  EXPECT_EQ(m.traced_gradient_buffer_bytes, 4 * padded);
  EXPECT_EQ(estimate_state(*config, layout).gradient_buffer_bytes, 4 * padded);
  layout.zero_stage = 3;
  m = estimate_memory(*config, layout);
  EXPECT_LT(m.param_bytes, 4 * psi / 3 + 4 * double(m.buckets.size()));  // padding per unit
  EXPECT_GE(m.param_bytes, 4 * psi / 3);
  EXPECT_EQ(m.buckets.size(), size_t(config->num_layers()) + 3);  // wte, wpe, blocks, ln_f
  // One rank: ZeRO has nothing to partition, gradients are made in the backward.
  layout.dp = 1;
  m = estimate_memory(*config, layout);
  EXPECT_EQ(m.param_bytes + m.optimizer_bytes, 12 * psi);
  EXPECT_EQ(m.grad_bytes, 0);
  layout.zero_stage = 4;
  EXPECT_THROW(estimate_memory(*config, layout), Error);
}

TEST(MemoryModel, TracedStepPeak) {
  const auto config = tiny_gpt2();
  MemoryLayout layout;
  layout.micro_batch = 3;
  layout.seq = 13;
  const size_t before = meta_allocator().bytes_in_use();
  const MemoryEstimate none = estimate_memory(*config, layout);
  EXPECT_EQ(meta_allocator().bytes_in_use(), before);  // the trace's tensors are all gone
  // One rank: every gradient is made in the backward and alive at its end; the saved activations
  // are alive when it begins.
  const double grads = 4 * double(none.parameter_count);
  EXPECT_GE(none.traced_step_bytes, grads);
  EXPECT_GE(none.traced_step_bytes, none.saved_activation_bytes);
  layout.recompute = nn::Recompute::Full;
  const MemoryEstimate full = estimate_memory(*config, layout);
  EXPECT_LT(full.saved_activation_bytes, none.saved_activation_bytes);
  EXPECT_LE(full.traced_step_bytes, none.traced_step_bytes);
}

}  // namespace
}  // namespace tessel::plan
