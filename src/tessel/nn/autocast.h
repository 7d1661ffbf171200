// SPDX-License-Identifier: Apache-2.0
// Mixed-precision forward (Micikevicius et al. 2018, "Mixed Precision Training"): for as long as
// a LowPrecisionScope lives, the layers of a model compute with 16-bit copies of their f32
// parameters. The copies come from ops::cast, so backward carries each copy's gradient into the
// f32 master's gradient; the masters, their gradients and the optimizer state stay f32.
#pragma once

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "tessel/nn/module.h"

namespace tessel::nn {

class LowPrecisionScope {
 public:
  // Masters whose copy is made later, by cast_deferred(): ZeRO-3's parameters, whose values exist
  // only while their unit is gathered.
  using Defer = std::function<bool(const Tensor& master)>;

  // Swaps the parameter handles of every Linear, Embedding, LayerNorm and RMSNorm under `root`
  // for `dtype` casts (one cast per distinct tensor, so tied weights stay tied). f32 and f64 leave
  // the model as it is. The scope must outlive the backward pass when blocks recompute their
  // forward: the recomputation reads the same copies. One copy may serve several forwards and
  // their backwards (a pipeline's micro-batches): a cast keeps nothing for its backward.
  LowPrecisionScope(Module& root, DType dtype);
  // The same over several subtrees (a pipeline rank's stages); masters for which `defer` is true
  // are left for cast_deferred().
  LowPrecisionScope(const std::vector<Module*>& roots, DType dtype, Defer defer = {});
  ~LowPrecisionScope();  // puts the masters back
  LowPrecisionScope(const LowPrecisionScope&) = delete;
  LowPrecisionScope& operator=(const LowPrecisionScope&) = delete;

  DType dtype() const { return dtype_; }
  // A deferred master's copy, made now (its values must be present) and swapped into every layer
  // member that holds the master; later calls return the same copy. Undefined when no layer under
  // the scope holds `master` deferred.
  Tensor cast_deferred(const Tensor& master);
  // Writes master rounded to copy's dtype into copy's storage, as the cast that made it did (no
  // graph is recorded): for a copy whose storage was released and materialised again.
  static void recast(const Tensor& master, const Tensor& copy);

 private:
  void add(Module& root, const Defer& defer, std::map<const void*, Tensor>& copies);

  DType dtype_;
  std::vector<std::pair<Tensor*, Tensor>> swapped_;  // layer member, master handle
  struct Deferred {
    std::vector<Tensor*> members;
    Tensor copy;
  };
  std::map<const void*, Deferred> deferred_;  // master storage owner -> its members and copy
};

}  // namespace tessel::nn
