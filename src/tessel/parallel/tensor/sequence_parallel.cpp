// SPDX-License-Identifier: Apache-2.0
// The Sequence style: sequence-sharded embeddings, dropouts that draw their piece of the
// full-sequence mask, and the region after a norm that feeds a vocab-split LM head; norms need no
// change to run on a sequence piece.
#include "tessel/parallel/tensor/sequence_parallel.h"

#include "tessel/core/error.h"
#include "tessel/nn/layers.h"
#include "tessel/ops/dropout.h"
#include "tessel/ops/embedding.h"
#include "tessel/ops/norm.h"
#include "tessel/ops/shape.h"
#include "tessel/sharding/placement.h"
#include "tessel/sharding/regions.h"

namespace tessel::parallel {
namespace {

Tensor enter_region(const Tensor& y, dist::Communicator& tp, const TpOptions& o) {
  if (!sequence_sharded(o)) return sharding::copy_to_region(y, tp);
  TESSEL_CHECK(y.ndim() >= 2 && o.sequence->length > 0, "Sequence: output ", y.shape().str(),
               " cannot be gathered along a sequence of ", o.sequence->length);
  return sharding::gather_from_region(y, tp, int(y.ndim() - 2), o.sequence->length);
}

// The piece of the mask one process draws for the whole sequence, and the generator advanced
// past all of it (a positional draw advances nothing): each rank's piece then gets its own part
// of one mask instead of every rank repeating the same pattern, and later draws stay in step
// with one process.
Tensor piece_dropout(const nn::Dropout& drop, bool training, const Tensor& x,
                     dist::Communicator& tp, const TpOptions& o) {
  if (!sequence_sharded(o))
    return ops::dropout(x, drop.p(), training, drop.generator(), drop.positional());
  const int64_t n = o.sequence->length;
  TESSEL_CHECK(x.ndim() >= 2 && n > 0, "Sequence dropout '", drop.path(), "': input ",
               x.shape().str(), " is not a piece of a sequence of ", n);
  const int d = int(x.ndim() - 2);
  const int64_t size = sharding::shard_size(n, tp.size(), tp.rank());
  TESSEL_CHECK(x.size(d) == size, "Sequence dropout '", drop.path(), "': input ", x.shape().str(),
               " holds ", x.size(d), " positions of dim ", d, ", expected rank ", tp.rank(),
               "'s piece of ", size, " of a sequence of ", n);
  const ops::DropoutPiece piece{d, sharding::shard_offset(n, tp.size(), tp.rank()), n};
  return ops::dropout_piece(x, drop.p(), piece, training, drop.generator(), drop.positional());
}

}  // namespace

void parallelize_sequence(nn::Module& module, dist::CommPtr tp, const TpOptions& options,
                          bool gather_output) {
  TESSEL_CHECK(tp != nullptr, "parallelize_sequence: the communicator is null");
  TESSEL_CHECK(!options.sequence_parallel || options.sequence != nullptr,
               "parallelize_sequence: sequence_parallel needs the shared SequenceState");
  TESSEL_CHECK(!module.has_forward_override(), "parallelize_sequence: '", module.path(),
               "' is already parallelized");
  const TpOptions o = options;
  if (auto* ln = dynamic_cast<nn::LayerNorm*>(&module)) {
    if (!gather_output) return;
    module.set_forward_override([ln, tp, o](nn::Module&, const std::vector<Tensor>& in) {
      return enter_region(ops::layer_norm(in.at(0), ln->weight, ln->bias, ln->eps()), *tp, o);
    });
    return;
  }
  if (auto* rms = dynamic_cast<nn::RMSNorm*>(&module)) {
    if (!gather_output) return;
    module.set_forward_override([rms, tp, o](nn::Module&, const std::vector<Tensor>& in) {
      return enter_region(ops::rms_norm(in.at(0), rms->weight, rms->eps()), *tp, o);
    });
    return;
  }
  const bool norm_or_dropout = dynamic_cast<nn::Dropout*>(&module) != nullptr;
  TESSEL_CHECK(!norm_or_dropout || !gather_output,
               "Sequence: gather_output is supported on LayerNorm and RMSNorm, not on '",
               module.path(), "' (", module.type_name(), ")");
  if (auto* drop = dynamic_cast<nn::Dropout*>(&module)) {
    if (!o.sequence_parallel) return;
    module.set_forward_override([drop, tp, o](nn::Module& m, const std::vector<Tensor>& in) {
      return piece_dropout(*drop, m.is_training(), in.at(0), *tp, o);
    });
    return;
  }
  if (norm_or_dropout) return;
  if (auto* emb = dynamic_cast<nn::Embedding*>(&module)) {
    TESSEL_CHECK(!gather_output, "Sequence: gather_output is not supported on an Embedding ('",
                 module.path(), "')");
    if (!o.sequence_parallel) return;
    module.set_forward_override([emb, tp, o](nn::Module&, const std::vector<Tensor>& in) {
      Tensor y = ops::embedding(emb->weight, in.at(0));
      if (!sequence_sharded(o)) return y;
      TESSEL_CHECK(y.ndim() >= 2, "Sequence embedding '", emb->path(), "': output ",
                   y.shape().str(), " has no sequence dim");
      const int d = int(y.ndim() - 2);
      const int64_t n = y.size(d);
      o.sequence->length = n;
      const int64_t off = sharding::shard_offset(n, tp->size(), tp->rank());
      return ops::slice(y, d, off, off + sharding::shard_size(n, tp->size(), tp->rank()));
    });
    return;
  }
  TESSEL_FAIL("style Sequence applies to LayerNorm, RMSNorm, Dropout or Embedding; '",
              module.path(), "' is a ", module.type_name());
}

}  // namespace tessel::parallel
