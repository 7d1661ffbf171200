// SPDX-License-Identifier: Apache-2.0
// DistTensor construction from a full tensor and gathering back.
#include "tessel/sharding/dist_tensor.h"

#include "tessel/core/error.h"
#include "tessel/sharding/redistribute.h"

namespace tessel::sharding {

namespace {

std::vector<int> mesh_sizes_of(const std::vector<dist::CommPtr>& axes) {
  std::vector<int> s;
  for (const auto& c : axes) s.push_back(c->size());
  return s;
}

}  // namespace

std::vector<dist::CommPtr> mesh_axes(const dist::DeviceMesh& mesh,
                                     const std::vector<std::string>& names) {
  std::vector<dist::CommPtr> axes;
  for (const std::string& name : names) axes.push_back(mesh.comm_ptr(name));
  return axes;
}

DistTensor::DistTensor(Tensor local, std::vector<dist::CommPtr> axes, Placements placements,
                       Shape global)
    : local_(std::move(local)),
      axes_(std::move(axes)),
      placements_(std::move(placements)),
      global_(std::move(global)) {
  TESSEL_CHECK(local_.defined(), "DistTensor: the local tensor is undefined");
  for (size_t a = 0; a < axes_.size(); ++a)
    TESSEL_CHECK(axes_[a] != nullptr, "DistTensor: mesh axis ", a, " has no communicator");
  std::vector<int> sizes = mesh_sizes(), at = coords();
  Shape want = local_shape(global_, placements_, sizes, at);
  TESSEL_CHECK(local_.shape() == want, "DistTensor: local tensor ", local_.shape(),
               " but placements ", str(placements_), " of global ", global_, " give this rank ",
               want);
}

std::vector<int> DistTensor::mesh_sizes() const {
  return mesh_sizes_of(axes_);
}

std::vector<int> DistTensor::coords() const {
  std::vector<int> c;
  for (const auto& comm : axes_) c.push_back(comm->rank());
  return c;
}

DistTensor DistTensor::from_global(const Tensor& global, std::vector<dist::CommPtr> axes,
                                   Placements placements) {
  TESSEL_CHECK(global.defined(), "DistTensor::from_global: the global tensor is undefined");
  std::vector<int> sizes = mesh_sizes_of(axes), at;
  for (const auto& c : axes) at.push_back(c->rank());
  const Shape shape = local_shape(global.shape(), placements, sizes, at);
  const std::vector<int64_t> offset = local_offset(global.shape(), placements, sizes, at);
  Tensor local = global;
  for (int d = 0; d < global.ndim(); ++d)
    if (shape[d] != global.size(d))
      local = local.slice(d, offset[size_t(d)], offset[size_t(d)] + shape[d]);
  bool zero = false;
  for (size_t a = 0; a < placements.size(); ++a) zero |= placements[a].is_partial() && at[a] != 0;
  if (zero)
    local = zeros(shape, global.dtype(), global.device());
  else if (local.is_same(global))
    local = global.clone();
  return DistTensor(std::move(local), std::move(axes), std::move(placements), global.shape());
}

Tensor DistTensor::to_global() const {
  return redistribute(*this, Placements(placements_.size(), Placement::replicate())).local();
}

}  // namespace tessel::sharding
