// SPDX-License-Identifier: Apache-2.0
// DistTensor: one rank's view of a tensor spread over mesh axes (PyTorch DTensor's idea): its
// local piece, the communicator of each mesh axis, one Placement per axis and the global shape.
// The local piece is an ordinary Tensor, so autograd records through it unchanged.
#pragma once

#include <string>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/dist/mesh.h"
#include "tessel/sharding/placement.h"
#include "tessel/tensor/tensor.h"

namespace tessel::sharding {

// The communicators of the named mesh axes, in the order given: the `axes` of a DistTensor.
std::vector<dist::CommPtr> mesh_axes(const dist::DeviceMesh& mesh,
                                     const std::vector<std::string>& names);

class DistTensor {
 public:
  // Checks that `local` has the shape the placements give this rank of `global`.
  DistTensor(Tensor local, std::vector<dist::CommPtr> axes, Placements placements, Shape global);

  // Every rank passes the same full tensor and keeps its piece (no communication). Along a
  // Partial axis, coordinate 0 keeps the values and the others hold zeros, so the sum is `global`.
  static DistTensor from_global(const Tensor& global, std::vector<dist::CommPtr> axes,
                                Placements placements);
  static DistTensor from_global(const Tensor& global, dist::CommPtr axis, Placement placement) {
    return from_global(global, std::vector<dist::CommPtr>{std::move(axis)}, Placements{placement});
  }

  // The full tensor on every rank (collective over every non-replicated axis); for tests and
  // checkpoints, not for the training path.
  Tensor to_global() const;

  const Tensor& local() const { return local_; }
  const std::vector<dist::CommPtr>& axes() const { return axes_; }
  dist::Communicator& axis(size_t a) const { return *axes_[a]; }
  const Placements& placements() const { return placements_; }
  const Shape& global_shape() const { return global_; }
  std::vector<int> mesh_sizes() const;
  std::vector<int> coords() const;

 private:
  Tensor local_;
  std::vector<dist::CommPtr> axes_;
  Placements placements_;
  Shape global_;
};

}  // namespace tessel::sharding
