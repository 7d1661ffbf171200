// SPDX-License-Identifier: Apache-2.0
// redistribute along one axis (dispatch to the staging collectives), its cost formula, and the
// autograd node whose backward redistributes the gradient the other way.
#include "tessel/sharding/redistribute.h"

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>

#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/sharding/staging.h"

namespace tessel::sharding {

namespace {

// The placement a gradient has (Megatron's replicated-loss convention).
Placement grad_placement(Placement p) {
  return p.is_partial() ? Placement::replicate() : p;
}

void check_fit(Placement p, const Shape& shape, std::string_view what) {
  TESSEL_CHECK(!p.is_shard() || p.dim < shape.ndim(), "redistribute: ", what, " placement ",
               p.str(), " names a dim outside ", shape);
}

// The communication-free and communicating cases, no autograd.
Tensor apply_raw(const Tensor& x, dist::Communicator& comm, Placement from, Placement to,
                 const Shape& shape) {
  if (from == to || comm.size() == 1) return x;
  if (from.is_shard() && to.is_replicate())
    return detail::gather_dim(x, comm, from.dim, shape[from.dim]);
  if (from.is_replicate() && to.is_shard()) return detail::slice_dim(x, comm, to.dim);
  if (from.is_partial() && to.is_replicate()) return detail::sum_all(x, comm);
  if (from.is_partial() && to.is_shard()) return detail::reduce_scatter_dim(x, comm, to.dim);
  if (from.is_shard() && to.is_shard())
    return detail::all_to_all_dim(x, comm, from.dim, to.dim, shape);
  if (from.is_replicate() && to.is_partial()) return detail::keep_on_first(x, comm);
  return detail::pad_to_partial(x, comm, from.dim, shape);  // S(d) -> P
}

// This thread's predicted bytes per communicator label.
std::unordered_map<std::string, int64_t>& tally() {
  thread_local std::unordered_map<std::string, int64_t> bytes;
  return bytes;
}

// apply_raw, its predicted cost added to the axis's tally.
Tensor apply_counted(const Tensor& x, dist::Communicator& comm, Placement from, Placement to,
                     const Shape& shape) {
  tally()[comm.label()] += redistribute_cost(from, to, shape, x.dtype(), comm.size()).bytes;
  return apply_raw(x, comm, from, to, shape);
}

class RedistributeBackward final : public autograd::Node {
 public:
  RedistributeBackward(dist::Communicator& comm, Placement from, Placement to, const Shape& shape,
                       GradArrives arrives)
      : comm_(comm), from_(from), to_(to), shape_(shape), arrives_(arrives) {}
  std::string_view name() const override { return "redistribute_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Placement arrived =
        arrives_ == GradArrives::Partial ? Placement::partial() : grad_placement(to_);
    return {apply_counted(grads[0], comm_, arrived, grad_placement(from_), shape_)};
  }

 private:
  dist::Communicator& comm_;  // the axis communicator outlives the graph
  Placement from_, to_;
  Shape shape_;
  GradArrives arrives_;
};

}  // namespace

RedistributeCost redistribute_cost(Placement from, Placement to, const Shape& shape, DType dtype,
                                   int axis_size) {
  check_fit(from, shape, "source");
  check_fit(to, shape, "target");
  TESSEL_CHECK(axis_size >= 1, "redistribute_cost: axis size ", axis_size, " must be >= 1");
  const int k = axis_size;
  const int64_t elt = int64_t(dtype_size(dtype)), total = shape.numel() * elt;
  if (from == to || k == 1 || to.is_partial() || (from.is_replicate() && to.is_shard()))
    return {0, "none"};
  if (from.is_partial() && to.is_replicate())
    return {2 * (total - shape.numel() / k * elt), "all_reduce"};
  const int d = to.is_shard() ? to.dim : from.dim;
  const int64_t n = shape[d], rest = n == 0 ? 0 : total / n;
  if (from.is_shard() && to.is_replicate())  // ring: every piece but the successor's
    return {total - shard_size(n, k, k - 1) * rest, n % k == 0 ? "all_gather" : "all_gather_v"};
  if (from.is_partial())  // to S(d): the padded buffer, all blocks but the one kept
    return {(k - 1) * ((n + k - 1) / k) * rest, "reduce_scatter"};
  // S(d) -> S(e): each rank sends its piece except the block that stays.
  const int64_t nd = shape[from.dim], ne = shape[to.dim];
  const int64_t other = ne == 0 || nd == 0 ? 0 : total / (nd * ne);
  int64_t worst = 0;
  for (int r = 0; r < k; ++r)
    worst = std::max(worst, shard_size(nd, k, r) * (ne - shard_size(ne, k, r)) * other);
  return {worst, nd % k == 0 && ne % k == 0 ? "all_to_all" : "all_to_all_v"};
}

Tensor redistribute_local(const Tensor& local, dist::Communicator& comm, Placement from,
                          Placement to, const Shape& shape, RedistributeCost* cost,
                          GradArrives grad) {
  TESSEL_CHECK(local.defined(), "redistribute: the local tensor is undefined");
  check_fit(from, shape, "source");
  check_fit(to, shape, "target");
  const Shape want = local_shape(shape, std::span<const Placement>(&from, 1),
                                 std::vector<int>{comm.size()}, std::vector<int>{comm.rank()});
  TESSEL_CHECK(local.shape() == want, "redistribute ", from.str(), " -> ", to.str(), " on '",
               comm.label(), "': rank ", comm.rank(), " holds ", local.shape(), ", but ",
               from.str(), " of ", shape, " gives it ", want);
  if (cost) *cost = redistribute_cost(from, to, shape, local.dtype(), comm.size());
  if (comm.size() == 1) return local;
  // The same values in the same place, unless a per-rank gradient must be summed on the way back.
  const bool identity = from == to;
  if (identity && grad == GradArrives::AsPlacement) return local;
  // The detached input makes even the identity's output a fresh tensor for the node to own.
  Tensor y = apply_counted(local.detach(), comm, from, to, shape);
  if (autograd::needs_grad({local}))
    autograd::record(std::make_shared<RedistributeBackward>(comm, from, to, shape, grad), {local},
                     {y});
  return y;
}

int64_t predicted_bytes(const std::string& label) {
  const auto it = tally().find(label);
  return it == tally().end() ? 0 : it->second;
}

DistTensor redistribute(const DistTensor& x, const Placements& to) {
  const Placements& from = x.placements();
  const std::vector<int> sizes = x.mesh_sizes(), at = x.coords();
  check_placements(to, x.global_shape().ndim(), sizes);
  // Last axis first: a dim split by several axes is split by the first one, then by the next
  // (placement.h), so undoing the last split first sees exactly the pieces the earlier axes
  // left. A change on axis a is refused (before any communication) while a later axis shards the
  // same dim, since the pieces would then be cut in the other order.
  const size_t n = from.size();
  Placements now = from;
  for (size_t a = n; a-- > 0;) {
    if (from[a] == to[a]) continue;
    for (size_t b = a + 1; b < n; ++b)
      for (Placement p : {from[a], to[a]})
        TESSEL_CHECK(!p.is_shard() || !now[b].is_shard(p.dim), "redistribute ", str(from), " -> ",
                     str(to), ": axis ", a, " changes ", p.str(), " while the later axis ", b,
                     " also shards dim ", p.dim, "; redistribute axis ", b, " to R first");
    now[a] = to[a];
  }
  Tensor local = x.local();
  now = from;
  for (size_t a = n; a-- > 0;) {
    if (from[a] == to[a]) continue;
    // The tensor as axis a sees it: the other axes' pieces applied, axis a's undone.
    Placements others = now;
    others[a] = Placement::replicate();
    const Shape shape = local_shape(x.global_shape(), others, sizes, at);
    local = redistribute_local(local, x.axis(a), now[a], to[a], shape);
    now[a] = to[a];
  }
  return DistTensor(local, x.axes(), to, x.global_shape());
}

}  // namespace tessel::sharding
