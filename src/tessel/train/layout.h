// SPDX-License-Identifier: Apache-2.0
// The parallel layout of a training run: the device mesh of `--dp A --tp B --pp C` and this rank's
// communicator along each axis (Megatron-LM's rank order, tp fastest; see dist/mesh.h). An axis of
// size 1 has no communicator, so single-process code paths stay free of communication.
#pragma once

#include <memory>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/dist/mesh.h"

namespace tessel::train {

struct TrainLayout {
  std::shared_ptr<dist::DeviceMesh> mesh;  // null: one process
  dist::CommPtr dp, tp, pp;                // null where the axis has size 1
  // Expert parallelism inside dp (DeepSpeed-MoE): ep groups of consecutive dp ranks, and the
  // ranks holding the same experts (dp rank r with r + ep, r + 2 ep, ...). Null when ep is 1 /
  // when dp equals ep.
  dist::CommPtr ep, ep_dp;

  int dp_size() const { return dp ? dp->size() : 1; }
  int tp_size() const { return tp ? tp->size() : 1; }
  int pp_size() const { return pp ? pp->size() : 1; }
  int ep_size() const { return ep ? ep->size() : 1; }
  int dp_rank() const { return dp ? dp->rank() : 0; }
  int tp_rank() const { return tp ? tp->rank() : 0; }
  int pp_rank() const { return pp ? pp->rank() : 0; }
  int world_size() const { return mesh ? mesh->size() : 1; }
  int world_rank() const { return mesh ? mesh->rank() : 0; }
  std::string str() const;  // "dp=2 tp=1 pp=2" (and " ep=2" with expert parallelism)
};

// The layout of `degrees` over `world` (collective over it). The product of the degrees must equal
// the world's size (an Error quoting every number otherwise, before any communication). A world of
// one, or a null world with every degree 1, gives the single-process layout. `ep` > 1 must divide
// dp: the ep groups are split from the dp communicator.
TrainLayout make_layout(dist::CommPtr world, int dp, int tp, int pp, int ep = 1);

// A data-parallel-only layout over `dp` (null or a world of one: one process), for tests and
// callers that hold just a communicator.
TrainLayout data_parallel_layout(dist::CommPtr dp);

}  // namespace tessel::train
