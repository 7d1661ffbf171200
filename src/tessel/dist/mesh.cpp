// SPDX-License-Identifier: Apache-2.0
// Mesh parsing, mixed-radix coordinates (first axis of the order fastest, as Megatron-LM's
// RankGenerator), and the creation of every axis-group communicator by splitting the world.
#include "tessel/dist/mesh.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "tessel/core/log.h"

namespace tessel::dist {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::vector<std::string> split_names(std::string_view s, std::string_view seps) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || seps.find(s[i]) != std::string_view::npos) {
      out.emplace_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

MeshShape MeshShape::parse(std::string_view spec, std::string_view order) {
  std::vector<MeshAxis> axes;
  TESSEL_CHECK(!trim(spec).empty(),
               "DeviceMesh: empty mesh spec; expected e.g. \"dp=2,pp=2,tp=2\"");
  for (const std::string& item : split_names(spec, ",")) {
    size_t eq = item.find('=');
    TESSEL_CHECK(eq != std::string::npos, "DeviceMesh: '", item, "' in \"", spec,
                 "\" is not name=size");
    std::string name(trim(std::string_view(item).substr(0, eq)));
    std::string value(trim(std::string_view(item).substr(eq + 1)));
    char* end = nullptr;
    long size = std::strtol(value.c_str(), &end, 10);
    TESSEL_CHECK(!value.empty() && *end == '\0' && size >= 1 && size <= 1 << 20,
                 "DeviceMesh: axis '", name, "' has size '", value, "' in \"", spec,
                 "\"; sizes are integers >= 1");
    axes.push_back({name, int(size)});
  }
  return MeshShape(std::move(axes), order);
}

MeshShape::MeshShape(std::vector<MeshAxis> axes, std::string_view order) {
  std::vector<std::string> known = split_names(order, "-");
  for (const MeshAxis& a : axes) {
    auto pos = std::find(known.begin(), known.end(), a.name);
    TESSEL_CHECK(pos != known.end(), "DeviceMesh: unknown axis '", a.name, "'; the order \"", order,
                 "\" knows ", std::string(order));
    TESSEL_CHECK(a.size >= 1, "DeviceMesh: axis '", a.name, "' has size ", a.size,
                 "; sizes are >= 1");
    for (const MeshAxis& b : axes_)
      TESSEL_CHECK(b.name != a.name, "DeviceMesh: axis '", a.name, "' appears twice");
    axes_.push_back(a);
  }
  TESSEL_CHECK(!axes_.empty(), "DeviceMesh: a mesh needs at least one axis");
  TESSEL_CHECK(axes_.size() <= 6, "DeviceMesh: ", axes_.size(), " axes; at most 6 are supported");
  std::stable_sort(axes_.begin(), axes_.end(), [&](const MeshAxis& x, const MeshAxis& y) {
    return std::find(known.begin(), known.end(), x.name) <
           std::find(known.begin(), known.end(), y.name);
  });
}

int MeshShape::num_ranks() const {
  int n = 1;
  for (const MeshAxis& a : axes_) n *= a.size;
  return n;
}

bool MeshShape::has_axis(std::string_view name) const {
  return std::any_of(axes_.begin(), axes_.end(), [&](const MeshAxis& a) { return a.name == name; });
}

int MeshShape::axis_index(std::string_view name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == name) return int(i);
  TESSEL_FAIL("DeviceMesh: no axis '", name, "' in mesh ", str());
}

int MeshShape::axis_size(std::string_view name) const {
  return has_axis(name) ? axes_[size_t(axis_index(name))].size : 1;
}

std::vector<int> MeshShape::coords(int rank) const {
  TESSEL_CHECK(rank >= 0 && rank < num_ranks(), "DeviceMesh: rank ", rank, " outside mesh ", str(),
               " of ", num_ranks(), " ranks");
  std::vector<int> c;
  for (const MeshAxis& a : axes_) {
    c.push_back(rank % a.size);
    rank /= a.size;
  }
  return c;
}

int MeshShape::rank_of(const std::vector<int>& coords) const {
  TESSEL_CHECK(coords.size() == axes_.size(), "DeviceMesh: ", coords.size(), " coordinates for ",
               axes_.size(), " axes");
  int rank = 0, stride = 1;
  for (size_t i = 0; i < axes_.size(); ++i) {
    TESSEL_CHECK(coords[i] >= 0 && coords[i] < axes_[i].size, "DeviceMesh: coordinate ", coords[i],
                 " outside axis '", axes_[i].name, "' of size ", axes_[i].size);
    rank += coords[i] * stride;
    stride *= axes_[i].size;
  }
  return rank;
}

std::vector<int> MeshShape::group(int rank, const std::vector<std::string>& names) const {
  std::vector<int> c = coords(rank);
  std::vector<size_t> idx;
  int n = 1;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (std::find(names.begin(), names.end(), axes_[i].name) != names.end()) {
      idx.push_back(i);
      n *= axes_[i].size;
    }
  }
  for (const std::string& name : names) axis_index(name);  // unknown names throw
  std::vector<int> out;
  for (int g = 0; g < n; ++g) {
    int rest = g;
    for (size_t i : idx) {
      c[i] = rest % axes_[i].size;
      rest /= axes_[i].size;
    }
    out.push_back(rank_of(c));
  }
  return out;
}

int MeshShape::group_rank(int rank, const std::vector<std::string>& names) const {
  std::vector<int> c = coords(rank);
  int r = 0, stride = 1;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (std::find(names.begin(), names.end(), axes_[i].name) == names.end()) continue;
    r += c[i] * stride;
    stride *= axes_[i].size;
  }
  return r;
}

std::string MeshShape::str() const {
  std::string s;
  for (size_t i = 0; i < axes_.size(); ++i)
    s += (i ? "," : "") + axes_[i].name + "=" + std::to_string(axes_[i].size);
  return s;
}

std::string MeshShape::label(const std::vector<std::string>& names) const {
  std::string s;
  for (const MeshAxis& a : axes_)
    if (std::find(names.begin(), names.end(), a.name) != names.end())
      s += (s.empty() ? "" : "+") + a.name;
  return s;
}

DeviceMesh::DeviceMesh(CommPtr world, MeshShape shape)
    : world_(std::move(world)), shape_(std::move(shape)) {
  TESSEL_CHECK(world_ != nullptr, "DeviceMesh: no world communicator");
  std::ostringstream product;
  for (size_t i = 0; i < shape_.axes().size(); ++i)
    product << (i ? " x " : "") << shape_.axes()[i].name << "=" << shape_.axes()[i].size;
  TESSEL_CHECK(shape_.num_ranks() == world_->size(), "DeviceMesh: mesh ", product.str(), " = ",
               shape_.num_ranks(), " ranks, but the world has ", world_->size(),
               " ranks; the product of the axis sizes must equal the world size");
  const int me = world_->rank();
  coords_ = shape_.coords(me);
  const size_t k = shape_.axes().size();
  for (uint32_t mask = 1; mask < (1u << k); ++mask) {
    std::vector<std::string> names;
    for (size_t i = 0; i < k; ++i)
      if (mask & (1u << i)) names.push_back(shape_.axes()[i].name);
    const std::string label = shape_.label(names);
    if (mask == (1u << k) - 1) {
      comms_[label] = world_;  // every axis: the world itself, in the same rank order
      continue;
    }
    std::vector<int> members = shape_.group(me, names);
    const int key = shape_.group_rank(me, names);
    CommPtr c = world_->split(members.front(), key, label);
    TESSEL_CHECK(c->size() == int(members.size()) && c->rank() == key, "DeviceMesh: communicator '",
                 label, "' has rank ", c->rank(), " of ", c->size(), ", expected ", key, " of ",
                 members.size());
    comms_[label] = c;
  }
  log(LogLevel::Debug, "dist: rank ", me, " of ", world_->size(), " in mesh ", shape_.str(), ": ",
      coords_str());
}

std::string DeviceMesh::coords_str() const {
  std::string s;
  for (size_t i = 0; i < coords_.size(); ++i)
    s += (i ? " " : "") + shape_.axes()[i].name + "=" + std::to_string(coords_[i]);
  return s;
}

std::vector<std::string> DeviceMesh::canonical(const std::vector<std::string>& names) const {
  for (const std::string& n : names) shape_.axis_index(n);  // throws naming the mesh
  return names;
}

Communicator& DeviceMesh::comm(std::initializer_list<std::string_view> axes) const {
  std::string joined;
  for (std::string_view a : axes) joined += (joined.empty() ? "" : "+") + std::string(a);
  return *comm_ptr(joined);
}

CommPtr DeviceMesh::comm_ptr(std::string_view axes) const {
  std::vector<std::string> names = canonical(split_names(axes, "+,"));
  auto it = comms_.find(shape_.label(names));
  TESSEL_CHECK(it != comms_.end(), "DeviceMesh: no communicator for axes '", axes, "' in mesh ",
               shape_.str());
  return it->second;
}

}  // namespace tessel::dist
