// SPDX-License-Identifier: Apache-2.0
// Construction without materialisation, the trainer's side. The model is built shape-only
// (nn::init::DeferInit: every parameter is a tensor whose storage has a size and no bytes, not
// even address space, and the layers record how they would have initialised it, reserving the
// same generator offsets), the layout's axes are applied to it (tensor parallelism cuts shape-only
// pieces, pipeline parallelism chooses the stages, ZeRO-3 allocates its blocks), and only then
// does each rank allocate what it holds and compute those elements, through the same placement
// code that loads a checkpoint's pieces (checkpoint_placement.h): a recipe is one more source of
// global regions. Values are bit-identical to the one-process initialisation, since element i of
// a parameter depends only on the seed and its offset (core/rng.h).
//
// So a rank's address space, not only its resident set, holds only its share: the whole model is
// never allocated on any rank (the tensors tensor parallelism cuts from, the parameters ZeRO-3
// partitions, the other stages' parameters), which `ulimit -v` proves (tests/train).
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

}  // namespace tessel::train
