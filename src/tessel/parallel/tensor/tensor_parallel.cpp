// SPDX-License-Identifier: Apache-2.0
// Colwise and Rowwise tensor parallelism for nn::Linear through a forward override (see the header
// for the mechanism): parameters rebound in place to this rank's piece, the parallel product
// computed around Megatron-LM's copy_to_region and reduce_from_region.
#include "tessel/parallel/tensor/tensor_parallel.h"

#include <memory>
#include <utility>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/nn/quantized.h"
#include "tessel/ops/elementwise.h"
#include "tessel/ops/matmul.h"
#include "tessel/ops/quant_linear.h"
#include "tessel/ops/shape.h"
#include "tessel/parallel/tensor/int8_row_blocks.h"
#include "tessel/sharding/placement.h"
#include "tessel/sharding/regions.h"
#include "tessel/sharding/shard_layout.h"

namespace tessel::parallel {
namespace {

// What the forward override of one parallelized layer needs.
struct TpState {
  TpStyle style = TpStyle::None;
  dist::CommPtr tp;
  // The layer, whose weight and bias members hold this rank's pieces. Read at each call, not
  // captured: a mixed-precision scope swaps the members for 16-bit copies while it lives.
  const nn::Linear* linear = nullptr;
  int64_t in_local = 0;   // Rowwise: this rank's input features
  int64_t in_offset = 0;  // Rowwise: where they start
  int64_t in_full = 0;    // Rowwise: the global input features
  bool input_is_sharded = true;
  TpOptions options;
  Int8RowSlice int8;  // Rowwise: where the slice falls among int8's activation blocks
};

int sequence_dim(const Tensor& x, const char* style) {
  TESSEL_CHECK(x.ndim() >= 2, style, " under sequence parallelism: input ", x.shape().str(),
               " needs a sequence dim before the features");
  return int(x.ndim() - 2);
}

void check_options(const TpOptions& o, const char* style) {
  TESSEL_CHECK(!o.sequence_parallel || o.sequence != nullptr, style,
               ": sequence_parallel needs the shared SequenceState");
  TESSEL_CHECK(o.blocks >= 1 && o.unit >= 1, style, ": blocks ", o.blocks, " and unit ", o.unit,
               " must be >= 1");
}

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

// This rank's product with its piece of the weight (`in` input features): through
// ops::quant_linear when the piece was converted for inference (--weights int8|bf16|f16), which a
// tensor-parallel piece is after the cut (models/inference_weights.h).
Tensor local_linear(const nn::Linear& linear, const Tensor& x, int64_t in, const Tensor& bias) {
  if (const auto type = linear.quant_type()) {
    nn::check_quantized_inference(linear, *type);
    return ops::quant_linear(x, *type, linear.weight, in, bias);
  }
  return ops::linear(x, linear.weight, bias);
}

// The Rowwise partial product. An int8 piece whose split cuts the int8 product's activation
// blocks multiplies in the whole row's blocks (int8_row_blocks.h): its weight was padded before
// conversion (pad_rowwise_int8), and its input is padded here with the shared blocks' maxima.
Tensor rowwise_product(const TpState& st, const Tensor& local) {
  const nn::Linear& linear = *st.linear;
  if (linear.quant_type() != kernels::quant::QuantType::Int8 || st.int8.aligned())
    return local_linear(linear, local, st.in_local, Tensor());
  nn::check_quantized_inference(linear, kernels::quant::QuantType::Int8);
  const int64_t width = st.int8.padded();
  TESSEL_CHECK(
      linear.weight.size(1) == kernels::quant::row_bytes(kernels::quant::QuantType::Int8, width),
      "Rowwise '", linear.path(), "': rank ", st.tp->rank(), "'s int8 piece of columns [",
      st.int8.offset, ", ", st.int8.offset + st.int8.len, ") of ", st.in_full,
      " cuts the 32-column activation blocks and must be padded to ", width,
      " columns before conversion (parallel::pad_rowwise_int8), but its rows hold ",
      linear.weight.size(1), " bytes");
  return ops::quant_linear(int8_row_input(local, st.int8, *st.tp), kernels::quant::QuantType::Int8,
                           linear.weight, width, Tensor());
}

Tensor run_colwise(const TpState& st, const Tensor& x) {
  const int64_t in = st.linear->in_features();
  TESSEL_CHECK(x.ndim() >= 1 && x.size(x.ndim() - 1) == in, "Colwise: input ", x.shape().str(),
               " must end in the full ", in, " input features");
  if (!sequence_sharded(st.options))
    return local_linear(*st.linear, sharding::copy_to_region(x, *st.tp), in, st.linear->bias);
  const int d = sequence_dim(x, "Colwise");
  const int64_t len = st.options.sequence->length;
  TESSEL_CHECK(len > 0 && sharding::shard_size(len, st.tp->size(), st.tp->rank()) == x.size(d),
               "Colwise under sequence parallelism: input ", x.shape().str(), " is not rank ",
               st.tp->rank(), "'s piece of a sequence of ", len,
               " (the sequence is split where a VocabParallel or Sequence embedding runs)");
  return local_linear(*st.linear, sharding::gather_from_region(x, *st.tp, d, len), in,
                      st.linear->bias);
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
  Tensor partial = rowwise_product(st, local);
  Tensor y = sequence_sharded(st.options) ? sharding::reduce_scatter_to_region(
                                                partial, *st.tp, sequence_dim(partial, "Rowwise"))
                                          : sharding::reduce_from_region(partial, *st.tp);
  return st.linear->bias.defined() ? ops::add(y, st.linear->bias) : y;
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

void parallelize_colwise(nn::Linear& linear, dist::CommPtr tp, const TpOptions& options) {
  check_unsharded(linear, tp, "parallelize_colwise");
  check_options(options, "parallelize_colwise");
  const int n = tp->size(), r = tp->rank();
  const int64_t out = linear.out_features();
  TESSEL_CHECK(out >= n || options.replicate, "parallelize_colwise: '", linear.path(), "' has ",
               out, " output features, fewer than the ", n,
               " tensor-parallel ranks (a rank would hold no feature)");
  sharding::ShardLayout spec{0, out, 0, options.blocks, options.unit, options.replicate};
  if (options.blocks > 1) {
    TESSEL_CHECK(out % options.blocks == 0 && (out / options.blocks) % options.unit == 0 &&
                     (out / options.blocks / options.unit) % n == 0,
                 "parallelize_colwise: '", linear.path(), "': ", out, " output features in ",
                 options.blocks, " blocks hold ", out / options.blocks / options.unit,
                 " units (heads) of ", options.unit, " rows each, not divisible by tp ", n);
  }
  const auto piece = options.copy_values ? sharding::shard_tensor : sharding::empty_shard;
  rebind(linear.weight, piece(linear.weight.detach(), spec, n, r));
  if (linear.bias.defined()) rebind(linear.bias, piece(linear.bias.detach(), spec, n, r));
  auto st = std::make_shared<TpState>();
  st->options = options;
  st->style = TpStyle::Colwise;
  st->tp = std::move(tp);
  st->linear = &linear;
  install(linear, std::move(st));
}

void parallelize_rowwise(nn::Linear& linear, dist::CommPtr tp, bool input_is_sharded,
                         const TpOptions& options) {
  check_unsharded(linear, tp, "parallelize_rowwise");
  check_options(options, "parallelize_rowwise");
  TESSEL_CHECK(input_is_sharded || !options.sequence_parallel, "parallelize_rowwise: '",
               linear.path(), "': under sequence parallelism the input must be a Colwise output ",
               "(input_is_sharded = true)");
  const int n = tp->size(), r = tp->rank();
  const int64_t in = linear.in_features();
  TESSEL_CHECK(in >= n, "parallelize_rowwise: '", linear.path(), "' has ", in,
               " input features, fewer than the ", n,
               " tensor-parallel ranks (a rank would hold no feature)");
  auto st = std::make_shared<TpState>();
  st->style = TpStyle::Rowwise;
  st->options = options;
  st->in_offset = sharding::shard_offset(in, n, r);
  st->in_local = sharding::shard_size(in, n, r);
  st->input_is_sharded = input_is_sharded;
  st->in_full = in;
  st->int8 = int8_row_slice(in, n, r);
  rebind(linear.weight,
         options.copy_values
             ? ops::slice(linear.weight.detach(), 1, st->in_offset, st->in_offset + st->in_local)
             : sharding::empty_shard(linear.weight.detach(), sharding::ShardLayout{1, in}, n, r));
  st->tp = std::move(tp);
  st->linear = &linear;  // the Rowwise bias is whole on every rank, added after the reduction
  install(linear, std::move(st));
}

bool pad_rowwise_int8(nn::Linear& linear, const dist::Communicator& tp) {
  TESSEL_CHECK(!linear.quant_type(), "pad_rowwise_int8: '", linear.path(),
               "' is already converted");
  const Int8RowSlice slice = int8_row_slice(linear.in_features(), tp.size(), tp.rank());
  TESSEL_CHECK(linear.weight.defined() && linear.weight.ndim() == 2 &&
                   linear.weight.size(0) == linear.out_features() &&
                   linear.weight.size(1) == slice.len,
               "pad_rowwise_int8: '", linear.path(), "' weight ",
               linear.weight.defined() ? linear.weight.shape().str() : std::string("undefined"),
               " is not rank ", tp.rank(), "'s Rowwise piece [", linear.out_features(), ", ",
               slice.len, "]");
  if (slice.padded() == slice.len) return false;
  rebind(linear.weight, pad_int8_columns(linear.weight.detach(), slice));
  return true;
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
