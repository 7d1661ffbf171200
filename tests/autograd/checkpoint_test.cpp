// SPDX-License-Identifier: Apache-2.0
// Activation checkpointing: the gradients are bitwise those of the plain run, dropout masks
// replay, nothing is recorded during the first run, and parameters used only inside the block
// still get gradients and hooks.
#include <gtest/gtest.h>

#include <vector>

#include "tessel/autograd/autograd.h"
#include "tessel/ops/ops.h"

namespace tessel::autograd {
namespace {

struct Model {
  std::vector<Tensor> params;
  explicit Model(DType dtype) {
    Generator g(99);
    for (Shape s : {Shape{13, 7}, Shape{13}, Shape{7, 13}, Shape{7}, Shape{13, 7}, Shape{13},
                    Shape{7, 13}, Shape{7}, Shape{7, 7}}) {
      Tensor t = randn(s, DType::F64, &g).to(dtype);
      t.set_requires_grad(true);
      params.push_back(t);
    }
  }
  // One residual block: x + W2 dropout(gelu(W1 x + b1)) + b2.
  Tensor block(const Tensor& x, int i) const {
    const std::vector<Tensor>& p = params;
    Tensor h = ops::gelu(ops::linear(x, p[size_t(4 * i)], p[size_t(4 * i + 1)]));
    h = ops::dropout(h, 0.3, true);
    return ops::add(x, ops::linear(h, p[size_t(4 * i + 2)], p[size_t(4 * i + 3)]));
  }
  Tensor loss(const Tensor& input, bool use_checkpoint) const {
    Tensor x = ops::linear(input, params[8]);  // the blocks' input is not a leaf
    for (int i = 0; i < 2; ++i) {
      if (use_checkpoint) {
        x = checkpoint([this, i](const std::vector<Tensor>& in) { return block(in[0], i); },
                       std::vector<Tensor>{x});
      } else {
        x = block(x, i);
      }
    }
    return ops::sum(ops::square(x));
  }
};

struct RunResult {
  std::vector<std::vector<float>> grads;
  double loss = 0;
  uint64_t offset_after = 0;
};

RunResult run(Model& m, const Tensor& input, bool use_checkpoint) {
  for (Tensor& p : m.params) p.set_grad(Tensor());
  Tensor in = input.detach();
  in.set_requires_grad(true);
  manual_seed(5);
  Tensor loss = m.loss(in, use_checkpoint);
  backward(loss);
  RunResult r;
  r.loss = loss.item();
  r.offset_after = default_generator().offset();
  for (const Tensor& p : m.params) r.grads.push_back(p.grad().to_vector<float>());
  r.grads.push_back(in.grad().to_vector<float>());
  return r;
}

TEST(Checkpoint, GradientsAreBitwiseIdenticalWithDropout) {
  Model m(DType::F32);
  Generator g(3);
  Tensor input = randn({5, 7}, DType::F32, &g);
  RunResult plain = run(m, input, false);
  RunResult ckpt = run(m, input, true);
  EXPECT_EQ(plain.loss, ckpt.loss);
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_EQ(plain.grads[i], ckpt.grads[i]) << "tensor " << i;
  // The recomputation restored the generator: later draws are unaffected.
  EXPECT_EQ(plain.offset_after, ckpt.offset_after);
  // Dropout really was active (a different seed changes the gradients).
  manual_seed(6);
  for (Tensor& p : m.params) p.set_grad(Tensor());
  backward(m.loss(input, false));
  EXPECT_NE(m.params[0].grad().to_vector<float>(), plain.grads[0]);
}

TEST(Checkpoint, FirstRunRecordsNothingAndBackwardRecomputes) {
  Tensor w = randn({7, 7}, DType::F64);
  w.set_requires_grad(true);
  Tensor x = randn({3, 7}, DType::F64);  // data: no input requires grad
  std::vector<bool> modes;
  Tensor y = checkpoint(
      [&](const std::vector<Tensor>& in) {
        modes.push_back(grad_enabled());
        return ops::tanh(ops::linear(in[0], w));
      },
      {x});
  ASSERT_EQ(modes, std::vector<bool>{false});
  ASSERT_TRUE(y.requires_grad());
  EXPECT_EQ(grad_fn(y)->name(), "CheckpointBackward");
  int hook_calls = 0;
  register_grad_ready_hook(w, [&](const Tensor&) { ++hook_calls; });
  backward(ops::sum(y));
  EXPECT_EQ(modes, (std::vector<bool>{false, true}));
  EXPECT_EQ(hook_calls, 1);
  ASSERT_TRUE(w.grad().defined());

  Tensor w_plain = w.detach().clone();
  w_plain.set_requires_grad(true);
  backward(ops::sum(ops::tanh(ops::linear(x, w_plain))));
  EXPECT_EQ(w.grad().to_vector<double>(), w_plain.grad().to_vector<double>());
}

TEST(Checkpoint, BackwardTwiceWithoutRetainGraphIsAnError) {
  Tensor x = randn({7}, DType::F64);
  x.set_requires_grad(true);
  Tensor y = checkpoint([](const std::vector<Tensor>& in) { return ops::exp(in[0]); }, {x});
  Tensor loss = ops::sum(y);
  backward(loss);
  EXPECT_THROW(backward(loss), Error);
}

TEST(Checkpoint, NoGradModeJustRunsTheFunction) {
  Tensor x = randn({7}, DType::F64);
  x.set_requires_grad(true);
  NoGradGuard no_grad;
  Tensor y = checkpoint([](const std::vector<Tensor>& in) { return ops::exp(in[0]); }, {x});
  EXPECT_FALSE(y.requires_grad());
}

}  // namespace
}  // namespace tessel::autograd
