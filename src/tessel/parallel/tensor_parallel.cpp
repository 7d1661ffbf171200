// SPDX-License-Identifier: Apache-2.0
// Colwise and Rowwise tensor parallelism for nn::Linear through a forward override (see the header
// for the mechanism): parameters rebound in place to this rank's piece, the parallel product
// computed around Megatron-LM's copy_to_region and reduce_from_region.
#include "tessel/parallel/tensor_parallel.h"

#include <memory>
#include <utility>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/ops/elementwise.h"
#include "tessel/ops/matmul.h"
#include "tessel/ops/shape.h"
#include "tessel/sharding/placement.h"
#include "tessel/sharding/regions.h"

namespace tessel::parallel {
namespace {

// What the forward override of one parallelized layer needs.
struct TpState {
  TpStyle style = TpStyle::None;
  dist::CommPtr tp;
  Tensor weight, bias;    // the registered parameters (this rank's pieces)
  int64_t in_local = 0;   // Rowwise: this rank's input features
  int64_t in_offset = 0;  // Rowwise: where they start
  int64_t in_full = 0;    // Rowwise: the global input features
  bool input_is_sharded = true;
};

// Points every handle of `param` (the module's registry and the layer's member) at `piece`,
// as Module::to does for dtypes, so the parameter keeps its name and identity.
void rebind(const Tensor& param, const Tensor& piece) {
  TensorImpl& impl = *param.impl_ptr();
  impl.storage = piece.storage_ptr();
  impl.offset = piece.offset();
  impl.shape = piece.shape();
  impl.grad.reset();
}

void check_unsharded(const nn::Linear& linear, const dist::CommPtr& tp, const char* style) {
  TESSEL_CHECK(tp != nullptr, style, ": the tensor-parallel communicator is null");
  TESSEL_CHECK(linear.weight.defined() &&
                   (linear.weight.shape() == Shape({linear.out_features(), linear.in_features()})),
               style, ": '", linear.path(), "' weight ",
               linear.weight.defined() ? linear.weight.shape().str() : std::string("undefined"),
               " is not the full [", linear.out_features(), ", ", linear.in_features(),
               "] (already parallelized?)");
}

Tensor run_colwise(const TpState& st, const Tensor& x) {
  const int64_t in = st.weight.size(1);
  TESSEL_CHECK(x.ndim() >= 1 && x.size(x.ndim() - 1) == in, "Colwise: input ", x.shape().str(),
               " must end in the full ", in, " input features");
  return ops::linear(sharding::copy_to_region(x, *st.tp), st.weight, st.bias);
}

Tensor run_rowwise(const TpState& st, const Tensor& x) {
  Tensor local = x;
  if (st.input_is_sharded) {
    TESSEL_CHECK(x.ndim() >= 1 && x.size(x.ndim() - 1) == st.in_local, "Rowwise: input ",
                 x.shape().str(), " must end in this rank's ", st.in_local,
                 " input features (rank ", st.tp->rank(), " of ", st.tp->size(),
                 ", balanced split of a Colwise output)");
  } else {
    const int64_t last = x.ndim() - 1;
    TESSEL_CHECK(x.ndim() >= 1 && x.size(int(last)) == st.in_full, "Rowwise: input ",
                 x.shape().str(), " must end in the full ", st.in_full,
                 " input features (input_is_sharded = false)");
    // The full input is replicated: its gradient pieces are summed back by copy_to_region.
    local = ops::slice(sharding::copy_to_region(x, *st.tp), int(last), st.in_offset,
                       st.in_offset + st.in_local);
  }
  Tensor y = sharding::reduce_from_region(ops::linear(local, st.weight), *st.tp);
  return st.bias.defined() ? ops::add(y, st.bias) : y;
}

void install(nn::Linear& linear, std::shared_ptr<TpState> st) {
  nn::Linear* lin = &linear;  // the override lives in the module, so it outlives it
  linear.set_forward_override([lin, st](nn::Module&, const std::vector<Tensor>& inputs) {
    TESSEL_CHECK(inputs.size() == 1 && inputs[0].defined() && inputs[0].ndim() >= 1,
                 "tensor-parallel Linear '", lin->path(), "': expected one defined input");
    return st->style == TpStyle::Colwise ? run_colwise(*st, inputs[0])
                                         : run_rowwise(*st, inputs[0]);
  });
}

}  // namespace

void parallelize_colwise(nn::Linear& linear, dist::CommPtr tp) {
  check_unsharded(linear, tp, "parallelize_colwise");
  const int n = tp->size(), r = tp->rank();
  const int64_t out = linear.out_features();
  TESSEL_CHECK(out >= n, "parallelize_colwise: '", linear.path(), "' has ", out,
               " output features, fewer than the ", n,
               " tensor-parallel ranks (a rank would hold no feature)");
  const int64_t off = sharding::shard_offset(out, n, r), len = sharding::shard_size(out, n, r);
  rebind(linear.weight, ops::slice(linear.weight.detach(), 0, off, off + len));
  if (linear.bias.defined())
    rebind(linear.bias, ops::slice(linear.bias.detach(), 0, off, off + len));
  auto st = std::make_shared<TpState>();
  st->style = TpStyle::Colwise;
  st->tp = std::move(tp);
  st->weight = linear.weight;
  st->bias = linear.bias;
  install(linear, std::move(st));
}

void parallelize_rowwise(nn::Linear& linear, dist::CommPtr tp, bool input_is_sharded) {
  check_unsharded(linear, tp, "parallelize_rowwise");
  const int n = tp->size(), r = tp->rank();
  const int64_t in = linear.in_features();
  TESSEL_CHECK(in >= n, "parallelize_rowwise: '", linear.path(), "' has ", in,
               " input features, fewer than the ", n,
               " tensor-parallel ranks (a rank would hold no feature)");
  auto st = std::make_shared<TpState>();
  st->style = TpStyle::Rowwise;
  st->in_offset = sharding::shard_offset(in, n, r);
  st->in_local = sharding::shard_size(in, n, r);
  st->input_is_sharded = input_is_sharded;
  st->in_full = in;
  rebind(linear.weight,
         ops::slice(linear.weight.detach(), 1, st->in_offset, st->in_offset + st->in_local));
  st->tp = std::move(tp);
  st->weight = linear.weight;
  st->bias = linear.bias;  // whole on every rank, added after the reduction
  install(linear, std::move(st));
}

TpStyle tp_style(const nn::Linear& linear) {
  if (linear.weight.size(0) != linear.out_features()) return TpStyle::Colwise;
  if (linear.weight.size(1) != linear.in_features()) return TpStyle::Rowwise;
  return TpStyle::None;
}

Tensor gather_full_weight(const nn::Linear& linear, dist::Communicator& tp, bool grad) {
  Tensor w = grad ? linear.weight.grad() : linear.weight;
  TESSEL_CHECK(w.defined(), "gather_full_weight: '", linear.path(), "' weight",
               grad ? " has no gradient" : " is undefined");
  switch (tp_style(linear)) {
    case TpStyle::Colwise:
      return sharding::gather_from_region(w.detach(), tp, 0, linear.out_features());
    case TpStyle::Rowwise:
      return sharding::gather_from_region(w.detach(), tp, 1, linear.in_features());
    case TpStyle::None:
      break;
  }
  return w.detach().clone();
}

Tensor gather_full_bias(const nn::Linear& linear, dist::Communicator& tp, bool grad) {
  if (!linear.bias.defined()) return Tensor();
  Tensor b = grad ? linear.bias.grad() : linear.bias;
  TESSEL_CHECK(b.defined(), "gather_full_bias: '", linear.path(), "' bias has no gradient");
  if (tp_style(linear) == TpStyle::Colwise)
    return sharding::gather_from_region(b.detach(), tp, 0, linear.out_features());
  return b.detach().clone();
}

}  // namespace tessel::parallel
