// SPDX-License-Identifier: Apache-2.0
// Regions of global tensors read from whole tensors in safetensors files, so that a rank loading a
// Hugging Face model directory or a whole-model tessel checkpoint (its model.safetensors is in the
// Hugging Face layout; a legacy optimizer.safetensors holds the full moments under their own names)
// reads only the bytes of what it holds: its tensor-parallel pieces, its pipeline stages' tensors,
// its ZeRO-3 blocks (the per-shard loading of FSDP's sharded state dicts and of Megatron's
// distributed checkpoints, here from an unsharded file). Each region is read with pread, a run of
// consecutive stored elements at a time: nothing of the files becomes resident, and no whole tensor
// is copied. Where the family stores a tensor transposed (GPT-2's Conv1D weights), a run is a
// stretch of one stored row, scattered into the region's column.
#pragma once

#include <memory>

#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"

namespace tessel::train {

// The regions of the tensors `layout` names (the family's hf_layout for a model directory), read
// from `checkpoint`'s files with pread (the checkpoint itself only for its headers; open it with
// io::SafetensorsLoad::Read) and widened to f32. A stored tensor
// that `layout.equal` ties to one of them (a tied LM head saved beside the embedding) is read over
// the same elements and must hold the same values. An Error names a tensor the layout lacks, or a
// region outside the tensor's shape.
RegionSource safetensors_region_source(std::shared_ptr<const io::SafetensorsCheckpoint> checkpoint,
                                       models::HfLayout layout);

// The layout of a file that stores tensors under tessel's names, none transposed (a legacy
// optimizer.safetensors): every tensor of `checkpoint`.
models::HfLayout same_name_layout(const io::SafetensorsCheckpoint& checkpoint);

}  // namespace tessel::train
