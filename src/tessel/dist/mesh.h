// SPDX-License-Identifier: Apache-2.0
// DeviceMesh: the world seen as an array of named axes, e.g. "dp=2,pp=2,tp=2" over 8 ranks, with
// one communicator per axis and per group of axes. Rank order follows Megatron-LM's RankGenerator
// (order "tp-cp-ep-dp-pp", the first axis varying fastest), so layouts and checkpoints line up
// with Megatron's: tp groups are adjacent ranks, which share a node.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/dist/communicator.h"

namespace tessel::dist {

struct MeshAxis {
  std::string name;
  int size = 1;
};

// The shape of a mesh without any communication: parsing, coordinates and groups.
class MeshShape {
 public:
  static constexpr std::string_view kDefaultOrder = "tp-cp-ep-dp-pp";

  // `spec`: "name=size" items separated by commas, any order ("dp=2,pp=2,tp=2"); axes absent from
  // the spec have size 1 and are left out. `order`: axis names, fastest first, separated by '-'.
  static MeshShape parse(std::string_view spec, std::string_view order = kDefaultOrder);
  MeshShape(std::vector<MeshAxis> axes, std::string_view order = kDefaultOrder);

  const std::vector<MeshAxis>& axes() const { return axes_; }  // fastest first
  int num_ranks() const;
  bool has_axis(std::string_view name) const;
  int axis_index(std::string_view name) const;  // throws Error naming the known axes
  int axis_size(std::string_view name) const;  // 1 for an axis of the order that is not in the mesh

  std::vector<int> coords(int rank) const;  // one per axis, fastest first
  int rank_of(const std::vector<int>& coords) const;
  // The ranks that differ from `rank` only along `names`, ordered by their rank in that group
  // (the named axes as a smaller mesh, in the same order).
  std::vector<int> group(int rank, const std::vector<std::string>& names) const;
  int group_rank(int rank, const std::vector<std::string>& names) const;

  std::string str() const;  // "tp=2,dp=2,pp=2" (fastest first)
  // Canonical label of a group of axes: names in mesh order joined by '+', e.g. "tp+dp".
  std::string label(const std::vector<std::string>& names) const;

 private:
  std::vector<MeshAxis> axes_;
};

class DeviceMesh {
 public:
  // Collective over `world`. Refuses, before any communication, a shape whose product differs
  // from world->size(). Creates every axis and group-of-axes communicator (in the same order on
  // every rank) and logs this rank's coordinates at debug level.
  DeviceMesh(CommPtr world, MeshShape shape);
  DeviceMesh(CommPtr world, std::string_view spec,
             std::string_view order = MeshShape::kDefaultOrder)
      : DeviceMesh(std::move(world), MeshShape::parse(spec, order)) {}

  const MeshShape& shape() const { return shape_; }
  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  const std::vector<int>& coords() const { return coords_; }
  int coord(std::string_view axis) const { return coords_[size_t(shape_.axis_index(axis))]; }
  std::string coords_str() const;  // "tp=1 dp=0 pp=1"

  Communicator& world() const { return *world_; }
  // The communicator along one axis ("tp") or a group of axes ("dp+tp", {"dp", "tp"}; any order).
  Communicator& comm(std::string_view axes) const { return *comm_ptr(axes); }
  Communicator& comm(std::initializer_list<std::string_view> axes) const;
  CommPtr comm_ptr(std::string_view axes) const;

 private:
  std::vector<std::string> canonical(const std::vector<std::string>& names) const;

  CommPtr world_;
  MeshShape shape_;
  std::vector<int> coords_;
  std::map<std::string, CommPtr> comms_;  // by canonical label
};

}  // namespace tessel::dist
