// SPDX-License-Identifier: Apache-2.0
// Dropout forward and backward: backward applies the same kernel with the same (seed, offset) to
// the gradient, since dy * keep / (1 - p) is exactly dropout(dy). A piece of a larger tensor (a
// sequence piece, a data-parallel rank's rows, or both) is addressed by its runs: for each index
// of the dims before the last partial dim, the piece holds one contiguous run of the full tensor,
// and the kernel draws that run at its full-tensor offset.
#include "tessel/ops/dropout.h"

#include <vector>

#include "tessel/ops/common.h"
#include "tessel/ops/elementwise.h"

namespace tessel::ops {

namespace {

// Where x lies inside the full tensor one process would drop out: per dim, the first index and
// the full size (0 and x's own size where x holds the whole dim).
struct Placement {
  std::vector<int64_t> start, full;
};

Placement whole(const Tensor& x) {
  Placement pl;
  pl.start.assign(size_t(x.ndim()), 0);
  for (int i = 0; i < x.ndim(); ++i) pl.full.push_back(x.size(i));
  return pl;
}

// The placement's runs: the last dim `d` that x holds only part of, and every dim after it whole,
// make each index of the dims before d one contiguous run of the full tensor.
struct Runs {
  std::vector<int64_t> sizes;    // x's sizes of the dims before d
  std::vector<int64_t> strides;  // their strides in the full tensor
  int64_t outer = 1, run = 0, first = 0;
  int64_t full_numel = 0;
};

Runs runs_of(const Tensor& x, const Placement& pl) {
  const int n = x.ndim();
  Runs r;
  std::vector<int64_t> stride(size_t(n), 1);
  r.full_numel = 1;
  for (int i = n - 1; i >= 0; --i) {
    stride[size_t(i)] = r.full_numel;
    r.full_numel *= pl.full[size_t(i)];
  }
  int d = -1;
  for (int i = n - 1; i >= 0 && d < 0; --i)
    if (x.size(i) != pl.full[size_t(i)]) d = i;
  if (d < 0) {
    r.run = x.numel();
    return r;
  }
  r.run = x.size(d) * stride[size_t(d)];
  for (int i = 0; i <= d; ++i) r.first += pl.start[size_t(i)] * stride[size_t(i)];
  for (int i = 0; i < d; ++i) {
    r.sizes.push_back(x.size(i));
    r.strides.push_back(stride[size_t(i)]);
    r.outer *= x.size(i);
  }
  return r;
}

// y = dropout of x's runs, drawn at their full-tensor indices of the stream (seed, offset).
void dropout_runs(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset,
                  const Runs& r) {
  kernels::Backend& backend = detail::backend(x);
  if (r.outer == 1) {  // one contiguous run
    backend.dropout(x, y, p, seed, offset + uint64_t(r.first));
    return;
  }
  const Tensor xs = x.detach().reshape({r.outer, r.run});
  const Tensor ys = y.reshape({r.outer, r.run});
  for (int64_t o = 0; o < r.outer; ++o) {
    int64_t at = r.first, rest = o;
    for (size_t i = r.sizes.size(); i-- > 0;) {
      at += (rest % r.sizes[i]) * r.strides[i];
      rest /= r.sizes[i];
    }
    Tensor yo = ys.narrow(0, o, 1);
    backend.dropout(xs.narrow(0, o, 1), yo, p, seed, offset + uint64_t(at));
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
                    const PositionalDraw* positional, Placement placement) {
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);  // every element dropped; 1/(1-p) would be infinite
  Generator& gen = generator ? *generator : default_generator();
  uint64_t seed = 0, offset = 0;
  if (positional) {
    // The site's stream (the part checked), read at one-process indices; nothing is reserved.
    seed = positional_stream(gen, *positional, 0)[0];
    if (positional->parts > 1)
      TESSEL_CHECK(x.ndim() >= 1 && placement.full[0] == x.size(0), "dropout: x ", x.shape(),
                   " is already a piece of dim 0, which the positional draw splits into ",
                   positional->parts, " parts");
    // The step's one-process tensor concatenates the blocks (micro-batches, then parts) along
    // dim 0; this one is block b of equal ones.
    if (const int64_t b = int64_t(positional_stream(gen, *positional, 1)[1]); b > 0) {
      TESSEL_CHECK(x.ndim() >= 1, "dropout: a positional draw of a scalar in block ", b);
      placement.start[0] += placement.full[0] * b;
      placement.full[0] *= b + 1;
    }
  }
  const Runs runs = runs_of(x, placement);
  if (!positional) {
    seed = gen.seed();
    offset = gen.reserve(uint64_t(runs.full_numel));
  }
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

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator,
               const PositionalDraw* positional) {
  check_dropout(x, p);
  return dropout_impl(x, p, training, generator, positional, whole(x));
}

Tensor dropout_piece(const Tensor& x, double p, const DropoutPiece& piece, bool training,
                     Generator* generator, const PositionalDraw* positional) {
  check_dropout(x, p);
  const int d = piece.dim < 0 ? piece.dim + x.ndim() : piece.dim;
  TESSEL_CHECK(d >= 0 && d < x.ndim(), "dropout_piece: dim ", piece.dim, " is outside a ", x.ndim(),
               "-dim tensor ", x.shape());
  TESSEL_CHECK(piece.start >= 0 && piece.start + x.size(d) <= piece.length, "dropout_piece: rows [",
               piece.start, ", ", piece.start + x.size(d), ") of dim ", d, " (x ", x.shape(),
               ") do not lie in a full length of ", piece.length);
  Placement placement = whole(x);
  placement.start[size_t(d)] = piece.start;
  placement.full[size_t(d)] = piece.length;
  return dropout_impl(x, p, training, generator, positional, placement);
}

}  // namespace tessel::ops
