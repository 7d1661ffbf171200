// SPDX-License-Identifier: Apache-2.0
// Construction without materialisation, the trainer's side. The model is built with every
// parameter allocated but untouched (nn::init::DeferInit: the layers record how they would have
// initialised each parameter, reserving the same generator offsets), the layout's axes are applied
// to it (tensor parallelism cuts pieces, pipeline parallelism chooses the stages, ZeRO-3 keeps
// blocks), and only then does each rank compute the elements it holds, through the same placement
// code that loads a checkpoint's pieces (checkpoint_placement.h): a recipe is one more source of
// global regions. Values are bit-identical to the one-process initialisation, since element i of
// a parameter depends only on the seed and its offset (core/rng.h).
//
// Pages never written cost no resident memory as long as nothing reads them either, so the axes
// are told that the model holds no values (copy_values = false: the tensor-parallel cut allocates
// its pieces, ZeRO-3 its blocks, neither reads the whole tensors), and the whole-model allocation
// a rank never writes (the full tensors tensor parallelism cuts from, the parameters ZeRO-3
// releases, the other stages' parameters) never shows in its RSS. A meta device (storage with a
// shape and no bytes) can replace that allocation later without changing this file's callers.
#pragma once

#include <map>
#include <string>

#include "tessel/core/shape.h"
#include "tessel/nn/init.h"
#include "tessel/tensor/tensor.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"

namespace tessel::train {

// A parameter's global shape and how its values are made.
struct ParameterInit {
  Shape shape;
  nn::init::InitRecipe recipe;
};
using ParameterInits = std::map<std::string, ParameterInit>;

// The recipes of `model`'s parameters (built under a DeferInit writing into `record`), by name,
// with their whole shapes: call it right after building, before any axis cuts the parameters.
ParameterInits parameter_inits(const nn::Module& model, const nn::init::InitRecord& record);

// Regions of the parameters computed from their recipes. An Error names a tensor it lacks or a
// region outside its shape.
RegionSource init_region_source(std::shared_ptr<const ParameterInits> inits);

// Points `param` (every handle of it) at zero pages of its size mapped straight from the operating
// system: it reads as zeros and costs resident memory only where something writes it later (a
// pipeline stage's copy of another stage's parameters, filled only when the model is gathered).
void use_zero_pages(const Tensor& param);

}  // namespace tessel::train
