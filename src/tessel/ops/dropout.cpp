// SPDX-License-Identifier: Apache-2.0
// Dropout forward and backward: backward applies the same kernel with the same (seed, offset) to
// the gradient, since dy * keep / (1 - p) is exactly dropout(dy). A piece of a larger tensor is
// addressed by its runs: for each index of the dims before the piece's dim, the piece holds one
// contiguous run of the full tensor, and the kernel draws that run at its full-tensor offset.
#include "tessel/ops/dropout.h"

#include "tessel/ops/common.h"
#include "tessel/ops/elementwise.h"

namespace tessel::ops {

namespace {

// The piece's runs: `outer` of `run` elements each, run o starting at full-tensor index
// o * stride + first.
struct Runs {
  int64_t outer = 1, run = 0, stride = 0, first = 0;
  int64_t full_numel = 0;
};

Runs piece_runs(const Tensor& x, const DropoutPiece& piece) {
  const int d = piece.dim < 0 ? piece.dim + x.ndim() : piece.dim;
  TESSEL_CHECK(d >= 0 && d < x.ndim(), "dropout_piece: dim ", piece.dim, " is outside a ", x.ndim(),
               "-dim tensor ", x.shape());
  TESSEL_CHECK(piece.start >= 0 && piece.start + x.size(d) <= piece.length, "dropout_piece: rows [",
               piece.start, ", ", piece.start + x.size(d), ") of dim ", d, " (x ", x.shape(),
               ") do not lie in a full length of ", piece.length);
  Runs r;
  int64_t inner = 1;
  for (int i = 0; i < d; ++i) r.outer *= x.size(i);
  for (int i = d + 1; i < x.ndim(); ++i) inner *= x.size(i);
  r.run = x.size(d) * inner;
  r.stride = piece.length * inner;
  r.first = piece.start * inner;
  r.full_numel = r.outer * r.stride;
  return r;
}

// y = dropout of x's runs, drawn at their full-tensor indices of the stream (seed, offset).
void dropout_runs(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset,
                  const Runs& r) {
  kernels::Backend& backend = detail::backend(x);
  if (r.outer == 1 || r.run == r.stride) {  // one contiguous run
    backend.dropout(x, y, p, seed, offset + uint64_t(r.first));
    return;
  }
  const Tensor xs = x.detach().reshape({r.outer, r.run});
  const Tensor ys = y.reshape({r.outer, r.run});
  for (int64_t o = 0; o < r.outer; ++o) {
    Tensor yo = ys.narrow(0, o, 1);
    backend.dropout(xs.narrow(0, o, 1), yo, p, seed, offset + uint64_t(o * r.stride + r.first));
  }
}

class DropoutBackward final : public autograd::Node {
 public:
  DropoutBackward(double p, uint64_t seed, uint64_t offset, const Runs& runs)
      : p_(p), seed_(seed), offset_(offset), runs_(runs) {}
  std::string_view name() const override { return "dropout_backward"; }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor dx = empty(g.shape(), g.dtype(), g.device());
    dropout_runs(g, dx, p_, seed_, offset_, runs_);
    return {dx};
  }

 private:
  double p_;
  uint64_t seed_, offset_;
  Runs runs_;
};

Tensor dropout_impl(const Tensor& x, double p, bool training, Generator* generator,
                    const Runs& runs) {
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);  // every element dropped; 1/(1-p) would be infinite
  Generator& gen = generator ? *generator : default_generator();
  const uint64_t seed = gen.seed();
  const uint64_t offset = gen.reserve(uint64_t(runs.full_numel));
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  dropout_runs(x, y, p, seed, offset, runs);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<DropoutBackward>(p, seed, offset, runs), {x}, {y});
  return y;
}

void check_dropout(const Tensor& x, double p) {
  detail::check_float(x, "dropout", "x", kernels::Op::Dropout);
  TESSEL_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability ", p, " is outside [0, 1]");
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  check_dropout(x, p);
  Runs whole;
  whole.run = whole.stride = whole.full_numel = x.numel();
  return dropout_impl(x, p, training, generator, whole);
}

Tensor dropout_piece(const Tensor& x, double p, const DropoutPiece& piece, bool training,
                     Generator* generator) {
  check_dropout(x, p);
  return dropout_impl(x, p, training, generator, piece_runs(x, piece));
}

}  // namespace tessel::ops
