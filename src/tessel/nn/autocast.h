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
  // A master's 16-bit copy kept between steps (its values already written, as recast() writes
  // them), or undefined for a copy made now: memory offload keeps the copies in chunks.
  using Kept = std::function<Tensor(const Tensor& master)>;

  // Swaps the parameter handles of every Linear, Embedding, LayerNorm and RMSNorm under `root`
  // for `dtype` casts (one cast per distinct tensor, so tied weights stay tied). f32 and f64 leave
  // the model as it is. The scope must outlive the backward pass when blocks recompute their
  // forward: the recomputation reads the same copies. One copy may serve several forwards and
  // their backwards (a pipeline's micro-batches): a cast keeps nothing for its backward.
  LowPrecisionScope(Module& root, DType dtype);
  // The same over several subtrees (a pipeline rank's stages); masters for which `defer` is true
  // are left for cast_deferred(); masters for which `kept` gives a copy use it (ops::cast_kept).
  LowPrecisionScope(const std::vector<Module*>& roots, DType dtype, Defer defer = {},
                    Kept kept = {});
  ~LowPrecisionScope();  // puts the masters back
  LowPrecisionScope(const LowPrecisionScope&) = delete;
  LowPrecisionScope& operator=(const LowPrecisionScope&) = delete;

  DType dtype() const { return dtype_; }
  // A deferred master's copy, made now (its values must be present, or its kept copy's) and
  // swapped into every layer member that holds the master; later calls return the same copy.
  // Undefined when no layer under the scope holds `master` deferred.
  Tensor cast_deferred(const Tensor& master);
  // Writes master rounded to copy's dtype into copy's storage, as the cast that made it did (no
  // graph is recorded): for a copy whose storage was released and materialised again.
  static void recast(const Tensor& master, const Tensor& copy);
  // The masters a scope over `roots` would give 16-bit copies (each once, in the walk's order):
  // what a caller keeping copies must keep them for.
  static std::vector<Tensor> masters(const std::vector<Module*>& roots);

 private:
  // Calls `visit` on every layer member the scope swaps under `root` (mixture-of-experts
  // routers stay f32, moe.cpp says why).
  static void for_each_member(Module& root, const std::function<void(Tensor&)>& visit);
  void add(Module& root, const Defer& defer, std::map<const void*, Tensor>& copies);
  Tensor copy_of(const Tensor& master);  // the kept copy, or a cast made now

  DType dtype_;
  Kept kept_;
  std::vector<std::pair<Tensor*, Tensor>> swapped_;  // layer member, master handle
  struct Deferred {
    std::vector<Tensor*> members;
    Tensor copy;
  };
  std::map<const void*, Deferred> deferred_;  // master storage owner -> its members and copy
};

}  // namespace tessel::nn
