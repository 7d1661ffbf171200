// SPDX-License-Identifier: Apache-2.0
// In-place parameter initialisers driven by a tessel::Generator, so a model built from the same
// seed has the same weights on any thread count.
//
// Deferred initialisation (construction without materialisation, as PyTorch's meta-device
// construction followed by torchdistx's deferred init or FSDP's param_init_fn): while a DeferInit
// lives on a thread, the layers built on it reserve their generator offsets exactly as the random
// initialisation would, but record an InitRecipe per parameter instead of writing values. Since
// the generator is counter-based (core/rng.h), element i of a parameter is a pure function of the
// recipe and i, so a rank can later compute exactly the elements it owns (a tensor-parallel
// slice, a ZeRO-3 block, a pipeline stage) bit-identical to the whole model built in one process.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tessel/core/rng.h"
#include "tessel/tensor/tensor.h"

namespace tessel::nn {
class Module;
}

namespace tessel::nn::init {

// N(mean, std^2) draws (generated in f32, converted to t's dtype).
void normal_(Tensor& t, double std, Generator* generator = nullptr, double mean = 0.0);
void zeros_(Tensor& t);
void ones_(Tensor& t);

// How the values of one whole parameter are made.
struct InitRecipe {
  enum Kind { Normal, Constant } kind = Constant;
  uint64_t seed = 0, offset = 0;  // Normal: the generator's stream and the first offset reserved
  double std = 0, mean = 0;       // Normal
  double value = 0;               // Constant
  // Element `index` (row-major, of the whole parameter) exactly as normal_ / fill write it in f32.
  float at(uint64_t index) const;
  // Elements [first, first + n) into dst.
  void fill(uint64_t first, int64_t n, float* dst) const;
};

// The recipes recorded while a DeferInit was alive, by storage (a parameter is a detached handle
// of the tensor the layer made, sharing its storage).
class InitRecord {
 public:
  void add(const Tensor& t, const InitRecipe& recipe) { recipes_[t.storage_ptr().get()] = recipe; }
  const InitRecipe* find(const Tensor& t) const;
  size_t size() const { return recipes_.size(); }

 private:
  std::map<const void*, InitRecipe> recipes_;
};

// While alive, the layers constructed on this thread record into `record` instead of writing
// their parameters, which are shape-only: no bytes and no address space until the rank that holds
// one materialises it (tensor/unallocated.h).
class DeferInit {
 public:
  explicit DeferInit(InitRecord& record);
  ~DeferInit();
  DeferInit(const DeferInit&) = delete;
  DeferInit& operator=(const DeferInit&) = delete;

 private:
  InitRecord* previous_;
};
InitRecord* deferred_record();  // the innermost live DeferInit's record, or null

// The recipes of `module`'s parameters by name; an Error names a parameter without one.
std::map<std::string, InitRecipe> recipes_by_name(const Module& module, const InitRecord& record);

}  // namespace tessel::nn::init
