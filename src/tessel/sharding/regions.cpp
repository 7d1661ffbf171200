// SPDX-License-Identifier: Apache-2.0
// Megatron-LM's region functions as autograd nodes over the staging collectives.
#include "tessel/sharding/regions.h"

#include <memory>

#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/sharding/staging.h"

namespace tessel::sharding {

namespace {

enum class Kind { Copy, Reduce, Gather, ReduceScatter };

// Forward of one kind; the backward of each kind is the forward of its conjugate.
Tensor run(Kind kind, const Tensor& x, dist::Communicator& comm, int dim, int64_t size) {
  switch (kind) {
    case Kind::Copy:
      return x;
    case Kind::Reduce:
      return detail::sum_all(x, comm);
    case Kind::Gather:
      return detail::gather_dim(x, comm, dim, size);
    case Kind::ReduceScatter:
      return detail::reduce_scatter_dim(x, comm, dim);
  }
  return x;
}

Kind conjugate(Kind kind) {
  switch (kind) {
    case Kind::Copy:
      return Kind::Reduce;
    case Kind::Reduce:
      return Kind::Copy;
    case Kind::Gather:
      return Kind::ReduceScatter;
    case Kind::ReduceScatter:
      return Kind::Gather;
  }
  return kind;
}

class RegionBackward final : public autograd::Node {
 public:
  RegionBackward(Kind kind, dist::Communicator& comm, int dim, int64_t input_size)
      : kind_(kind), comm_(comm), dim_(dim), input_size_(input_size) {}
  std::string_view name() const override { return "region_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {run(conjugate(kind_), grads[0], comm_, dim_, input_size_)};
  }

 private:
  Kind kind_;
  dist::Communicator& comm_;  // outlives the graph
  int dim_;
  int64_t input_size_;  // the forward input's size along dim_ (what the backward gather restores)
};

Tensor region(Kind kind, const Tensor& x, dist::Communicator& comm, int dim, int64_t size,
              std::string_view op) {
  TESSEL_CHECK(x.defined(), op, ": input is undefined");
  if (kind == Kind::Gather || kind == Kind::ReduceScatter)
    TESSEL_CHECK(dim >= 0 && dim < x.ndim(), op, ": dim ", dim, " outside a tensor of shape ",
                 x.shape());
  const int64_t input_size = kind == Kind::Gather || kind == Kind::ReduceScatter ? x.size(dim) : 0;
  if (comm.size() == 1) return x;
  // The detached input makes even the identity's output a fresh tensor for the node to own.
  Tensor y = run(kind, x.detach(), comm, dim, size);
  if (autograd::needs_grad({x}))
    autograd::record(std::make_shared<RegionBackward>(kind, comm, dim, input_size), {x}, {y});
  return y;
}

}  // namespace

Tensor copy_to_region(const Tensor& x, dist::Communicator& comm) {
  return region(Kind::Copy, x, comm, 0, 0, "copy_to_region");
}

Tensor reduce_from_region(const Tensor& x, dist::Communicator& comm) {
  return region(Kind::Reduce, x, comm, 0, 0, "reduce_from_region");
}

Tensor gather_from_region(const Tensor& x, dist::Communicator& comm, int dim, int64_t size) {
  return region(Kind::Gather, x, comm, dim, size, "gather_from_region");
}

Tensor reduce_scatter_to_region(const Tensor& x, dist::Communicator& comm, int dim) {
  return region(Kind::ReduceScatter, x, comm, dim, 0, "reduce_scatter_to_region");
}

}  // namespace tessel::sharding
