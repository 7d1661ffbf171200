// SPDX-License-Identifier: Apache-2.0
// Global gradient-norm clipping: the norm against an fp64 sum and against
// torch.nn.utils.clip_grad_norm_, the clipping factor, the untouched cases (under the maximum,
// non-finite norm), undefined gradients, other dtypes, and thread-count independence.
#include "tessel/train/optim/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/tolerance.h"
#include "optim_reference.h"
#include "tessel/core/threads.h"

namespace tessel::train {
namespace {

using testing::max_rel_err;

// Parameters whose gradients have these shapes, random N(0, 1) gradients. The large one spans
// several of the kernel's blocks with a ragged end.
std::vector<Tensor> make_params(const std::vector<Shape>& shapes, Generator& gen,
                                DType dtype = DType::F32) {
  std::vector<Tensor> params;
  for (const Shape& s : shapes) {
    Tensor p = zeros(s, dtype);
    p.set_requires_grad(true);
    p.set_grad(randn(s, dtype, &gen));
    params.push_back(p);
  }
  return params;
}

const std::vector<Shape> kShapes = {Shape{7, 13}, Shape{13}, Shape{33, 7}, Shape{1},
                                    Shape{3, 16389}};

double fp64_square_sum(const std::vector<Tensor>& params) {
  double s = 0;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    for (double x : p.grad().to_vector<double>()) s += x * x;
  }
  return s;
}

std::vector<Tensor> grad_copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

TEST(GradClip, NormMatchesFp64Sum) {
  Generator gen(21);
  for (DType dtype : {DType::F32, DType::F64}) {
    auto params = make_params(kShapes, gen, dtype);
    const double ref = fp64_square_sum(params);
    EXPECT_LE(std::abs(grad_square_sum(params) - ref), 1e-12 * ref) << dtype_name(dtype);
    EXPECT_LE(std::abs(grad_norm(params) - std::sqrt(ref)), 1e-12 * std::sqrt(ref));
  }
  EXPECT_EQ(grad_norm({}), 0.0);
}

TEST(GradClip, SameNormForAnyThreadCount) {
  Generator gen(22);
  auto params = make_params(kShapes, gen);
  const int threads = num_threads();
  set_num_threads(1);
  const double one = grad_square_sum(params);
  set_num_threads(2);
  const double two = grad_square_sum(params);
  set_num_threads(3);
  const double three = grad_square_sum(params);
  set_num_threads(threads);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

TEST(GradClip, ScalesEveryGradientByMaxOverNorm) {
  Generator gen(23);
  auto params = make_params(kShapes, gen);
  auto before = grad_copies(params);
  const double norm = std::sqrt(fp64_square_sum(params));
  const double max_norm = 0.37;
  EXPECT_NEAR(clip_grad_norm(params, max_norm), norm, 1e-12 * norm);  // the norm before clipping
  const float factor = float(max_norm / (norm + 1e-6));
  for (size_t i = 0; i < params.size(); ++i) {
    auto b = before[i].to_vector<float>(), a = params[i].grad().to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) ASSERT_EQ(a[k], b[k] * factor) << i << " " << k;
  }
  // The factor is max_norm / (norm + 1e-6) (torch's epsilon), rounded to f32: the clipped norm is
  // max_norm (1 - 1e-6 / norm) within a few u, so 1e-5 relative holds for norms above 0.1.
  EXPECT_NEAR(grad_norm(params), max_norm, 1e-5 * max_norm);
}

TEST(GradClip, NothingScaledUnderTheMaximum) {
  Generator gen(24);
  auto params = make_params(kShapes, gen);
  auto before = grad_copies(params);
  const double norm = grad_norm(params);
  EXPECT_EQ(clip_grad_norm(params, 2 * norm), norm);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(bitwise_equal(params[i].grad(), before[i]));
}

TEST(GradClip, NonFiniteNormIsReturnedAndNothingScaled) {
  for (double bad :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Generator gen(25);
    auto params = make_params(kShapes, gen);
    params[2].grad().data<float>()[17] = float(bad);
    auto before = grad_copies(params);
    const double norm = clip_grad_norm(params, 1.0);
    EXPECT_FALSE(std::isfinite(norm));
    EXPECT_EQ(std::isnan(norm), std::isnan(bad));
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(bitwise_equal(params[i].grad(), before[i])) << i;
  }
}

TEST(GradClip, UndefinedGradientsAreIgnored) {
  Generator gen(26);
  auto params = make_params(kShapes, gen);
  params[0].set_grad(Tensor());
  params[3].set_grad(Tensor());
  const double norm = std::sqrt(fp64_square_sum(params));
  EXPECT_NEAR(clip_grad_norm(params, 0.5), norm, 1e-12 * norm);
  EXPECT_FALSE(params[0].grad().defined());
  EXPECT_FALSE(params[3].grad().defined());
  EXPECT_NEAR(grad_norm(params), 0.5, 1e-5);  // as above: the 1e-6 epsilon and one rounding
  std::vector<Tensor> none = {zeros(Shape{3}).set_requires_grad(true)};
  EXPECT_EQ(clip_grad_norm(none, 1.0), 0.0);
}

TEST(GradClip, HalfPrecisionGradients) {
  Tensor p = zeros(Shape{5}, DType::BF16).set_requires_grad(true);
  p.set_grad(from_data<float>({0.5f, -1.5f, 2.0f, 0.25f, -3.0f}, Shape{5}).to(DType::BF16));
  const double sum = 0.25 + 2.25 + 4.0 + 0.0625 + 9.0;
  EXPECT_EQ(grad_square_sum({p}), sum);
  scale_grads({p}, 0.5);
  EXPECT_EQ(p.grad().to_vector<float>(), (std::vector<float>{0.25f, -0.75f, 1.0f, 0.125f, -1.5f}));
}

TEST(GradClip, BadMaxNormIsAnError) {
  Generator gen(27);
  auto params = make_params(kShapes, gen);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    try {
      clip_grad_norm(params, bad);
      ADD_FAILURE() << "no error for max_norm " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("max_norm must be finite and > 0"), std::string::npos)
          << e.what();
    }
  }
}

TEST(GradClip, MatchesTorchClipGradNorm) {
  Generator gen(28);
  struct Case {
    std::string name;
    double max_norm;
    std::vector<Tensor> params;
  };
  std::vector<Case> cases = {{"over", 0.37, make_params(kShapes, gen)},
                             {"under", 1e6, make_params(kShapes, gen)}};
  auto dir = testing::scratch_dir("clip_torch");
  std::string index = "{\"mode\": \"clip\", \"cases\": [";
  for (size_t c = 0; c < cases.size(); ++c) {
    index += std::string(c ? ", " : "") + "{\"name\": \"" + cases[c].name +
             "\", \"max_norm\": " + std::to_string(cases[c].max_norm) + ", \"grads\": [";
    for (size_t i = 0; i < cases[c].params.size(); ++i) {
      const Tensor& p = cases[c].params[i];
      index += std::string(i ? ", " : "") + "{\"name\": \"g" + std::to_string(i) +
               "\", \"shape\": " + testing::json_shape(p.shape()) + "}";
      testing::write_f32(dir / ("clip." + cases[c].name + ".g" + std::to_string(i) + ".f32"),
                         p.grad());
    }
    index += "]}";
  }
  index += "]}\n";
  std::ofstream(dir / "index.json") << index;
  testing::run_torch_reference(dir);
  if (HasFatalFailure()) return;

  for (Case& c : cases) {
    const double norm = clip_grad_norm(c.params, c.max_norm);
    auto torch_norm = testing::read_raw<double>(dir / ("out.clip." + c.name + ".norm.f64"), 1);
    auto norm64 = testing::read_raw<double>(dir / ("out.clip." + c.name + ".norm64.f64"), 1);
    // PyTorch sums the squares in f32 in its own order; tessel in f64 (equal to the f64
    // reference to 1e-12), so the difference is PyTorch's f32 error over the elements.
    int64_t elements = 0;
    for (const auto& p : c.params) elements += p.grad().defined() ? p.grad().numel() : 0;
    const double torch_tol = test::reference_tolerance(DType::F32, std::max<int64_t>(elements, 1));
    EXPECT_LE(std::abs(norm - torch_norm[0]), torch_tol * torch_norm[0]) << c.name;
    EXPECT_LE(std::abs(norm - norm64[0]), 1e-12 * norm64[0]) << c.name;
    for (size_t i = 0; i < c.params.size(); ++i) {
      const Tensor& g = c.params[i].grad();
      auto ref = testing::read_raw<float>(
          dir / ("out.clip." + c.name + ".g" + std::to_string(i) + ".f32"), size_t(g.numel()));
      // The gradients are scaled by factors that differ by PyTorch's norm error and one rounding.
      EXPECT_LE(max_rel_err(g.to_vector<float>(), ref),
                torch_tol + 2 * test::unit_roundoff(DType::F32))
          << c.name << " grad " << i;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessel::train
