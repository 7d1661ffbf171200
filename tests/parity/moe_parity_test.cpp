// SPDX-License-Identifier: Apache-2.0
// tessel's MoE layer (nn/moe.h) against an independent PyTorch implementation: moe_reference.py
// (run by the CTest fixture) writes, per case, the input, the parameters and in float64 the
// output, the routing (chosen experts, kept pairs, tokens per expert), the load-balancing, z and
// weighted aux losses, and the gradient of sum(y * r) + aux_loss for the input and every
// parameter. tessel runs each case in f64 and in f32 and must route identically and match every
// value within 1e-10 (f64) or 1e-4 (f32) of its scale. Cases: top-1 and top-2, Mixtral's and
// Switch's gates, with and without token dropping, SwiGLU and GELU experts, PR-MoE's residual form.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "parity_test_util.h"
#include "tessel/autograd/autograd.h"
#include "tessel/io/safetensors.h"
#include "tessel/nn/moe.h"
#include "tessel/ops/ops.h"

namespace tessel::nn {
namespace {

std::string parity_dir() {
  const char* env = std::getenv("TESSEL_MOE_PARITY_DIR");
  return env != nullptr ? env : TESSEL_MOE_PARITY_DIR;
}

using tessel::test::max_diff;

MoEConfig config_of(const nlohmann::json& j) {
  MoEConfig c;
  c.hidden = j.at("hidden");
  c.ffn_hidden = j.at("ffn_hidden");
  c.num_experts = j.at("num_experts");
  c.top_k = j.at("top_k");
  c.gate_form = parse_gate_form(j.at("gate_form").get<std::string>());
  c.expert = parse_expert_kind(j.at("expert").get<std::string>());
  c.drop_tokens = j.at("drop_tokens");
  c.capacity_factor = j.at("capacity_factor");
  c.aux_loss_coef = j.at("aux_loss_coef");
  c.z_loss_coef = j.at("z_loss_coef");
  c.residual = j.at("residual");
  return c;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what, double rtol) {
  ASSERT_TRUE(got.defined()) << what << " is undefined";
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto [diff, scale] = max_diff(got, want);
  EXPECT_LE(diff, rtol * std::max(scale, 1.0))
      << what << ": max |diff| " << diff << " at scale " << scale;
}

// f64 runs the reference's arithmetic up to rounding order: 1e-10. f32 (the training dtype, through
// oneDNN's products) against the f64 reference: sums of at most a few dozen products of O(1)
// values, relative error a few 1e-6; 1e-4 of the largest value leaves margin while a wrong gate,
// a dropped pair kept or a missing gradient term is off by O(1e-2) or more.
struct Variant {
  std::string name;
  DType dtype;
  double rtol;
};
void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.name;
}

class MoEParity : public ::testing::TestWithParam<std::tuple<std::string, Variant>> {};

TEST_P(MoEParity, RoutingOutputLossesAndGradients) {
  const auto& [name, variant] = GetParam();
  const DType dt = variant.dtype;
  const double rtol = variant.rtol;
  io::SafetensorsFile ref = io::SafetensorsFile::open(parity_dir() + "/" + name + ".safetensors");
  const MoEConfig config = config_of(nlohmann::json::parse(ref.metadata().at("config")));
  MoE moe(config, Init::none(dt));
  NamedTensors state;
  for (const auto& [pname, p] : moe.named_parameters())
    state.emplace_back(pname, ref.load(pname).to(dt));
  moe.load_state_dict(state);

  Tensor x = ref.load("x").to(dt).set_requires_grad();
  MoE::Output out = moe.forward(x);
  Tensor loss = ops::add(ops::sum(ops::mul(out.output, ref.load("r").to(dt))), out.aux_loss);
  autograd::backward(loss);

  // Routing: the same experts in the same order, the same pairs dropped.
  const Routing& r = moe.last_routing();
  EXPECT_EQ(r.choice, ref.load("choice").to_vector<int64_t>());
  std::vector<int64_t> kept(r.kept.begin(), r.kept.end());
  EXPECT_EQ(kept, ref.load("kept").to_vector<int64_t>());
  EXPECT_EQ(moe.last_stats().tokens_per_expert, ref.load("tokens_per_expert").to_vector<int64_t>());
  int64_t want_dropped = 0;
  for (int64_t k : kept) want_dropped += 1 - k;
  EXPECT_EQ(moe.last_stats().dropped, want_dropped);
  if (!config.drop_tokens) {
    EXPECT_EQ(moe.last_stats().dropped, 0);
  }

  expect_close(out.output, ref.load("y"), "output", rtol);
  expect_close(out.balance_loss.reshape({1}), ref.load("balance_loss"), "balance_loss", rtol);
  expect_close(out.z_loss.reshape({1}), ref.load("z_loss"), "z_loss", rtol);
  expect_close(out.aux_loss.reshape({1}), ref.load("aux_loss"), "aux_loss", rtol);
  EXPECT_NEAR(moe.last_stats().aux_loss, ref.load("aux_loss").to_vector<double>()[0], rtol);
  expect_close(x.grad(), ref.load("grad.x"), "grad.x", rtol);
  for (const auto& [pname, p] : moe.named_parameters())
    expect_close(p.grad(), ref.load("grad." + pname), "grad." + pname, rtol);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoEParity,
    ::testing::Combine(::testing::Values("top2_mixtral_swiglu_drop", "top2_mixtral_swiglu_nodrop",
                                         "top2_switch_gelu_drop", "top1_switch_gelu_drop",
                                         "top1_switch_swiglu_nodrop", "top1_mixtral_gelu_nodrop",
                                         "top2_mixtral_gelu_nodrop_e3", "residual_swiglu_drop",
                                         "residual_gelu_nodrop"),
                       ::testing::Values(Variant{"f64", DType::F64, 1e-10},
                                         Variant{"f32", DType::F32, 1e-4})),
    [](const ::testing::TestParamInfo<std::tuple<std::string, Variant>>& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
    });

}  // namespace
}  // namespace tessel::nn
