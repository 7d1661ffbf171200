// SPDX-License-Identifier: Apache-2.0
// AdamW against torch.optim.AdamW (two param groups, changing lr), against a plain double
// re-implementation for f64 parameters, and its bookkeeping: groups, skipped parameters, saved
// state that resumes bit for bit, and the errors.
#include "tessel/train/optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/tolerance.h"
#include "optim_reference.h"

namespace tessel::train {
namespace {

using testing::max_rel_err;

struct Spec {
  std::string name;
  Shape shape;
};

// A weight, its bias, an embedding and a norm gain: both groups, odd sizes.
const std::vector<Spec> kSpecs = {
    {"fc.weight", Shape{7, 13}},
    {"fc.bias", Shape{13}},
    {"wte.weight", Shape{33, 7}},
    {"ln.weight", Shape{7}},
};

NamedTensors make_params(const std::vector<Spec>& specs, DType dtype, Generator& gen) {
  NamedTensors params;
  for (const Spec& s : specs) {
    Tensor p = randn(s.shape, dtype, &gen);
    p.set_requires_grad(true);
    params.emplace_back(s.name, p);
  }
  return params;
}

// grads[step][i]: the gradient of parameter i at step `step` (0-based here).
std::vector<std::vector<Tensor>> make_grads(const NamedTensors& params, int steps, Generator& gen) {
  std::vector<std::vector<Tensor>> grads(static_cast<size_t>(steps));
  for (auto& per_step : grads)
    for (const auto& [name, p] : params) per_step.push_back(randn(p.shape(), p.dtype(), &gen));
  return grads;
}

void set_grads(NamedTensors& params, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < params.size(); ++i) params[i].second.set_grad(grads[i].clone());
}

NamedTensors clone_params(const NamedTensors& params) {
  NamedTensors out;
  for (const auto& [name, p] : params) {
    Tensor c = p.clone();
    c.set_requires_grad(true);
    out.emplace_back(name, c);
  }
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AdamW, MatchesTorchAdamWWithTwoGroupsAndChangingLr) {
  const std::vector<double> lrs = {1e-2, 3e-2, 2e-2, 5e-3, 4e-2};
  AdamWOptions opt;
  opt.beta1 = 0.9;
  opt.beta2 = 0.95;
  opt.eps = 1e-8;
  opt.weight_decay = 0.1;
  Generator gen(11);
  NamedTensors params = make_params(kSpecs, DType::F32, gen);
  auto grads = make_grads(params, int(lrs.size()), gen);

  auto dir = testing::scratch_dir("adamw_torch");
  std::string index =
      "{\"mode\": \"adamw\", \"betas\": [0.9, 0.95], \"eps\": 1e-8, "
      "\"weight_decay\": 0.1, \"lrs\": [";
  for (size_t s = 0; s < lrs.size(); ++s) index += (s ? ", " : "") + std::to_string(lrs[s]);
  index += "], \"params\": [";
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    index += std::string(i ? ", " : "") + "{\"name\": \"" + name +
             "\", \"shape\": " + testing::json_shape(p.shape()) + "}";
    testing::write_f32(dir / ("init." + name + ".f32"), p);
    for (size_t s = 0; s < lrs.size(); ++s)
      testing::write_f32(dir / ("grad." + std::to_string(s + 1) + "." + name + ".f32"),
                         grads[s][i]);
  }
  index += "]}\n";
  std::ofstream(dir / "index.json") << index;
  testing::run_torch_reference(dir);
  if (HasFatalFailure()) return;

  AdamW adamw(params, opt);
  for (size_t s = 0; s < lrs.size(); ++s) {
    set_grads(params, grads[s]);
    adamw.step(std::stod(std::to_string(lrs[s])));  // the lr exactly as the script read it
  }
  EXPECT_EQ(adamw.step_count(), int64_t(lrs.size()));
  NamedTensors state = adamw.state();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    const size_t n = size_t(p.numel());
    const std::pair<std::string, Tensor> checks[] = {
        {"param", p},
        {"exp_avg", state[i].second},
        {"exp_avg_sq", state[params.size() + i].second}};
    for (const auto& [what, t] : checks) {
      auto ref = testing::read_raw<float>(dir / ("out." + what + "." + name + ".f32"), n);
      // AdamW is element-wise: no sum is reordered, only about ten roundings per element that a
      // kernel set may fuse (FMA) or not, each at most u; 16u (1e-6) bounds them, and a wrong
      // bias correction or decay is off by 1e-3 or more.
      double err = max_rel_err(t.to_vector<float>(), ref);
      EXPECT_LE(err, 16 * test::unit_roundoff(DType::F32)) << what << " of " << name;
    }
  }
  std::filesystem::remove_all(dir);
}

// torch.optim.AdamW's single-tensor update, written out in double.
void reference_step(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                    std::vector<double>& v, double lr, double wd, const AdamWOptions& o,
                    int64_t step) {
  const double bc1 = 1 - std::pow(o.beta1, double(step));
  const double bc2 = 1 - std::pow(o.beta2, double(step));
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1 - lr * wd;
    m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
    v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
    p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
  }
}

TEST(AdamW, F64MatchesPlainDoubleUpdate) {
  AdamWOptions opt;
  opt.beta1 = 0.8;
  opt.beta2 = 0.97;
  opt.eps = 1e-6;
  opt.weight_decay = 0.25;
  const std::vector<double> lrs = {0.05, 0.1, 0.02, 0.07};
  Generator gen(3);
  NamedTensors params = make_params(kSpecs, DType::F64, gen);
  auto grads = make_grads(params, int(lrs.size()), gen);
  std::vector<std::vector<double>> p, m, v;
  for (const auto& [name, t] : params) {
    p.push_back(t.to_vector<double>());
    m.emplace_back(size_t(t.numel()), 0.0);
    v.emplace_back(size_t(t.numel()), 0.0);
  }
  AdamW adamw(params, opt);
  for (size_t s = 0; s < lrs.size(); ++s) {
    set_grads(params, grads[s]);
    adamw.step(lrs[s]);
    for (size_t i = 0; i < params.size(); ++i) {
      double wd = params[i].second.ndim() >= 2 ? opt.weight_decay : 0.0;
      reference_step(p[i], grads[s][i].to_vector<double>(), m[i], v[i], lrs[s], wd, opt,
                     int64_t(s + 1));
    }
  }
  NamedTensors state = adamw.state();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(state[i].second.dtype(), DType::F64);
    EXPECT_LE(max_rel_err(params[i].second.to_vector<double>(), p[i]), 1e-13) << params[i].first;
    EXPECT_LE(max_rel_err(state[i].second.to_vector<double>(), m[i]), 1e-13) << params[i].first;
    EXPECT_LE(max_rel_err(state[params.size() + i].second.to_vector<double>(), v[i]), 1e-13)
        << params[i].first;
  }
}

TEST(AdamW, DecayGroupIsTensorsOfTwoOrMoreDims) {
  Generator gen(1);
  AdamWOptions opt;
  opt.weight_decay = 0.5;
  AdamW adamw(make_params(kSpecs, DType::F32, gen), opt);
  EXPECT_EQ(adamw.decay_count(), 7 * 13 + 33 * 7);
  EXPECT_EQ(adamw.no_decay_count(), 13 + 7);
  EXPECT_TRUE(AdamW::decays("h.0.attn.c_attn.weight", Shape{7, 21}));
  EXPECT_TRUE(AdamW::decays("x", Shape{2, 3, 5}));
  EXPECT_FALSE(AdamW::decays("h.0.attn.c_attn.bias", Shape{21}));
  EXPECT_EQ(adamw.state_bytes(), int64_t(2 * 4 * (7 * 13 + 13 + 33 * 7 + 7)));

  // With zero gradients the Adam term is 0 / (0 + eps) = 0, so what remains is the decay: the
  // decay group shrinks by exactly (1 - lr * wd) in f32, the others do not move at all.
  NamedTensors params = adamw.params();
  std::vector<Tensor> before;
  for (auto& [name, p] : params) {
    before.push_back(p.clone());
    p.set_grad(zeros(p.shape()));
  }
  adamw.step(0.1);
  const float shrink = float(1.0 - 0.1 * 0.5);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    if (p.ndim() >= 2) {
      auto b = before[i].to_vector<float>(), a = p.to_vector<float>();
      for (size_t k = 0; k < a.size(); ++k) ASSERT_EQ(a[k], b[k] * shrink) << params[i].first;
    } else {
      EXPECT_TRUE(bitwise_equal(p, before[i])) << params[i].first;
    }
  }
}

TEST(AdamW, SkipsParametersWithoutGradient) {
  Generator gen(2);
  NamedTensors params = make_params(kSpecs, DType::F32, gen);
  AdamW adamw(params, AdamWOptions{});
  auto grads = make_grads(params, 1, gen);
  set_grads(params, grads[0]);
  params[2].second.set_grad(Tensor());  // the embedding got no gradient this step
  Tensor emb_before = params[2].second.clone();
  adamw.step(1e-2);
  EXPECT_EQ(adamw.step_count(), 1);
  EXPECT_TRUE(bitwise_equal(params[2].second, emb_before));
  NamedTensors state = adamw.state();
  EXPECT_EQ(state[2].second.to_vector<float>(), std::vector<float>(33 * 7, 0.0f));
  EXPECT_EQ(state[6].second.to_vector<float>(), std::vector<float>(33 * 7, 0.0f));
  EXPECT_NE(state[0].second.to_vector<float>(), std::vector<float>(7 * 13, 0.0f));
}

TEST(AdamW, SavedStateResumesBitForBit) {
  Generator gen(4);
  AdamWOptions opt;
  opt.weight_decay = 0.1;
  opt.beta2 = 0.95;
  NamedTensors a_params = make_params(kSpecs, DType::F32, gen);
  auto grads = make_grads(a_params, 5, gen);
  AdamW a(a_params, opt);
  for (int s = 0; s < 3; ++s) {
    set_grads(a_params, grads[size_t(s)]);
    a.step(1e-2 * (s + 1));
  }
  NamedTensors saved;
  for (const auto& [name, t] : a.state()) saved.emplace_back(name, t.clone());
  ASSERT_EQ(saved.size(), 2 * kSpecs.size());
  EXPECT_EQ(saved[0].first, "exp_avg.fc.weight");
  EXPECT_EQ(saved[kSpecs.size() + 3].first, "exp_avg_sq.ln.weight");

  NamedTensors b_params = clone_params(a_params);
  AdamW b(b_params, opt);
  b.load_state(saved, a.step_count());
  EXPECT_EQ(b.step_count(), 3);
  for (int s = 3; s < 5; ++s) {
    set_grads(a_params, grads[size_t(s)]);
    set_grads(b_params, grads[size_t(s)]);
    a.step(1e-2 * (s + 1));
    b.step(1e-2 * (s + 1));
  }
  for (size_t i = 0; i < a_params.size(); ++i)
    EXPECT_TRUE(bitwise_equal(a_params[i].second, b_params[i].second)) << a_params[i].first;
  NamedTensors sa = a.state(), sb = b.state();
  for (size_t i = 0; i < sa.size(); ++i)
    EXPECT_TRUE(bitwise_equal(sa[i].second, sb[i].second)) << sa[i].first;
}

TEST(AdamW, LoadStateListsEveryBadNameAndChangesNothing) {
  Generator gen(5);
  NamedTensors params = make_params(kSpecs, DType::F32, gen);
  AdamW adamw(params, AdamWOptions{});
  NamedTensors state;
  for (const auto& [name, t] : adamw.state()) state.emplace_back(name, full(t.shape(), 1.0));
  state.erase(state.begin() + 1);                             // exp_avg.fc.bias missing
  state[0].second = zeros(Shape{13, 7});                      // exp_avg.fc.weight mis-shaped
  state.emplace_back("exp_avg.nope", zeros(Shape{3}));        // unexpected
  state.emplace_back("momentum.fc.weight", zeros(Shape{3}));  // unexpected
  std::string msg = error_of([&] { adamw.load_state(state, 9); });
  for (const char* part :
       {"AdamW.load_state", "exp_avg.fc.bias", "exp_avg.fc.weight", "[13, 7]", "exp_avg.nope",
        "momentum.fc.weight", "missing", "unexpected", "mis-shaped"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
  EXPECT_EQ(adamw.step_count(), 0);
  for (const auto& [name, t] : adamw.state())
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(size_t(t.numel()), 0.0f)) << name;
}

TEST(AdamW, ConstructorAndStepErrorsNameTheProblem) {
  Generator gen(6);
  NamedTensors params = make_params(kSpecs, DType::F32, gen);
  {
    NamedTensors bad = params;
    bad[1].second = randn(Shape{13}, DType::F32, &gen);  // requires_grad not set
    std::string msg = error_of([&] { AdamW(bad, AdamWOptions{}); });
    EXPECT_NE(msg.find("'fc.bias'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not require grad"), std::string::npos) << msg;
  }
  {
    NamedTensors bad = params;
    bad.emplace_back("fc.weight", randn(Shape{3}).set_requires_grad(true));
    std::string msg = error_of([&] { AdamW(bad, AdamWOptions{}); });
    EXPECT_NE(msg.find("'fc.weight' appears twice"), std::string::npos) << msg;
  }
  {
    NamedTensors bad = params;
    bad.emplace_back("half.weight", zeros(Shape{3, 5}, DType::BF16).set_requires_grad(true));
    std::string msg = error_of([&] { AdamW(bad, AdamWOptions{}); });
    EXPECT_NE(msg.find("'half.weight' is bf16"), std::string::npos) << msg;
  }
  {
    NamedTensors bad = params;
    bad.emplace_back("ids", zeros(Shape{5}, DType::I32));
    std::string msg = error_of([&] { AdamW(bad, AdamWOptions{}); });
    EXPECT_NE(msg.find("'ids' is i32"), std::string::npos) << msg;
  }
  {
    AdamWOptions o;
    o.beta2 = 1.0;
    std::string msg = error_of([&] { AdamW(params, o); });
    EXPECT_NE(msg.find("betas must lie in [0, 1)"), std::string::npos) << msg;
  }
  AdamW adamw(params, AdamWOptions{});
  EXPECT_NE(error_of([&] { adamw.step(std::nan("")); }).find("lr must be finite"),
            std::string::npos);
  // A wrong gradient is caught before anything moves, the step count included.
  auto grads = make_grads(params, 1, gen);
  set_grads(params, grads[0]);
  params[3].second.set_grad(zeros(Shape{8}));
  Tensor w_before = params[0].second.clone();
  std::string msg = error_of([&] { adamw.step(1e-2); });
  EXPECT_NE(msg.find("gradient of 'ln.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[8]"), std::string::npos) << msg;
  EXPECT_EQ(adamw.step_count(), 0);
  EXPECT_TRUE(bitwise_equal(params[0].second, w_before));
}

}  // namespace
}  // namespace tessel::train
