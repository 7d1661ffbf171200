// SPDX-License-Identifier: Apache-2.0
// Contiguous staging layouts for the collectives of redistribute.
#include "tessel/sharding/staging.h"

#include <vector>

#include "tessel/core/error.h"
#include "tessel/sharding/placement.h"

namespace tessel::sharding::detail {

namespace {

std::vector<int> front_order(int ndim, int d) {
  std::vector<int> order{d};
  for (int i = 0; i < ndim; ++i)
    if (i != d) order.push_back(i);
  return order;
}

// Elements per unit of dim d.
int64_t row_elems(const Shape& s, int d) {
  int64_t n = 1;
  for (int i = 0; i < s.ndim(); ++i)
    if (i != d) n *= s[i];
  return n;
}

// The shape of t after to_front(t, d).
Shape front_shape(const Shape& s, int d) {
  std::vector<int64_t> dims;
  for (int i : front_order(s.ndim(), d)) dims.push_back(s[i]);
  return Shape(dims);
}

}  // namespace

Tensor to_front(const Tensor& t, int d) {
  if (d == 0) return t;
  std::vector<int> order = front_order(t.ndim(), d);
  return t.permute(std::span<const int>(order));
}

Tensor from_front(const Tensor& t, int d) {
  if (d == 0) return t;
  std::vector<int> order = front_order(t.ndim(), d), inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[size_t(order[i])] = int(i);
  return t.permute(std::span<const int>(inverse));
}

Tensor gather_dim(const Tensor& piece, dist::Communicator& comm, int d, int64_t n) {
  const int k = comm.size();
  const Shape full = piece.shape().with(d, n);
  TESSEL_CHECK(piece.size(d) == shard_size(n, k, comm.rank()), "gather along dim ", d, " on '",
               comm.label(), "': rank ", comm.rank(), " holds ", piece.shape(), ", expected ",
               shard_size(n, k, comm.rank()), " of ", n, " along dim ", d);
  Tensor staged = to_front(piece, d);
  Tensor out = empty(front_shape(full, d), piece.dtype(), piece.device());
  if (n % k == 0) {
    comm.all_gather(staged, out);
  } else {
    std::vector<int64_t> counts = shard_sizes(n, k);
    for (int64_t& c : counts) c *= row_elems(full, d);
    comm.all_gather_v(staged, out, counts);
  }
  return from_front(out, d);
}

Tensor slice_dim(const Tensor& full, dist::Communicator& comm, int d) {
  const int64_t n = full.size(d), off = shard_offset(n, comm.size(), comm.rank());
  return full.slice(d, off, off + shard_size(n, comm.size(), comm.rank()));
}

Tensor sum_all(const Tensor& addend, dist::Communicator& comm) {
  Tensor out = empty_like(addend);
  comm.all_reduce(addend, out);
  return out;
}

Tensor reduce_scatter_dim(const Tensor& addend, dist::Communicator& comm, int d) {
  const int k = comm.size(), me = comm.rank();
  const int64_t n = addend.size(d), m = (n + k - 1) / k;
  Tensor staged = to_front(addend, d);
  if (n % k != 0) {
    // Pad every piece to m rows so that the blocks reduce_scatter splits are equal.
    Tensor padded =
        zeros(front_shape(addend.shape(), d).with(0, m * k), addend.dtype(), addend.device());
    for (int r = 0; r < k; ++r) {
      const int64_t size = shard_size(n, k, r);
      if (size == 0) continue;
      padded.narrow(0, r * m, size).copy_from(staged.narrow(0, shard_offset(n, k, r), size));
    }
    staged = padded;
  }
  Tensor out = empty(front_shape(addend.shape(), d).with(0, m), addend.dtype(), addend.device());
  comm.reduce_scatter(staged, out);
  const int64_t mine = shard_size(n, k, me);
  if (mine != m) out = out.slice(0, 0, mine);
  return from_front(out, d);
}

Tensor all_to_all_dim(const Tensor& piece, dist::Communicator& comm, int d, int e,
                      const Shape& shape) {
  const int k = comm.size(), me = comm.rank();
  const int64_t nd = shape[d], ne = shape[e];
  TESSEL_CHECK(piece.shape() == shape.with(d, shard_size(nd, k, me)), "all_to_all from S(", d,
               ") to S(", e, ") on '", comm.label(), "': rank ", me, " holds ", piece.shape(),
               ", expected its piece of ", shape);
  Tensor staged = to_front(piece, e);  // [ne, ... d piece ...]: block r' is contiguous
  const int64_t per_e = row_elems(piece.shape(), e), rest = row_elems(shape, d) / ne;
  std::vector<int64_t> send(static_cast<size_t>(k)), recv(static_cast<size_t>(k));
  for (int r = 0; r < k; ++r) {
    send[size_t(r)] = shard_size(ne, k, r) * per_e;
    recv[size_t(r)] = shard_size(ne, k, me) * shard_size(nd, k, r) * rest;
  }
  int64_t total = 0;
  for (int64_t c : recv) total += c;
  Tensor out = empty(Shape{total}, piece.dtype(), piece.device());
  if (nd % k == 0 && ne % k == 0) {
    comm.all_to_all(staged.flatten(), out);
  } else {
    comm.all_to_all_v(staged.flatten(), send, out, recv);
  }
  // Block r holds [my e piece, ... r's d piece ...] in the e-first layout: join them along d.
  const int d_front = d < e ? d + 1 : d;
  std::vector<Tensor> blocks;
  int64_t at = 0;
  for (int r = 0; r < k; ++r) {
    Shape s = front_shape(shape.with(e, shard_size(ne, k, me)).with(d, shard_size(nd, k, r)), e);
    blocks.push_back(out.narrow(0, at, recv[size_t(r)]).reshape(s));
    at += recv[size_t(r)];
  }
  return from_front(concat(std::span<const Tensor>(blocks), d_front), e);
}

Tensor pad_to_partial(const Tensor& piece, dist::Communicator& comm, int d, const Shape& shape) {
  const int64_t n = shape[d], off = shard_offset(n, comm.size(), comm.rank());
  Tensor full = zeros(front_shape(shape, d), piece.dtype(), piece.device());
  if (piece.size(d) > 0) full.narrow(0, off, piece.size(d)).copy_from(to_front(piece, d));
  return from_front(full, d);
}

Tensor keep_on_first(const Tensor& full, dist::Communicator& comm) {
  return comm.rank() == 0 ? full.clone() : zeros_like(full);
}

}  // namespace tessel::sharding::detail
