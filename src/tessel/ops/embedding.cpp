// SPDX-License-Identifier: Apache-2.0
// Embedding forward (gather) and backward (scatter-add into a zeroed [V, C] gradient).
// Repeated ids add up in the kernel, which accumulates into the gradient; when the weight already
// has a gradient from another use (a tied LM head), backward scatters straight into that one.
#include "tessel/ops/embedding.h"

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

class EmbeddingBackward final : public autograd::Node {
 public:
  EmbeddingBackward(const Tensor& weight, const Tensor& flat_ids)
      : weight_shape_(weight.shape()), ids_(autograd::saved(flat_ids)) {}
  std::string_view name() const override { return "embedding_backward"; }
  void release_saved() override { ids_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor dweight = zeros(weight_shape_, g.dtype(), g.device());
    detail::backend(g).embedding_backward(g.reshape({ids_.numel(), weight_shape_[1]}), ids_,
                                          dweight);
    return {dweight};
  }

  // A tied weight (GPT-2's token embedding is also the LM head) already has a dense gradient
  // waiting: scatter into it rather than into a zeroed [V, C] that the engine would then add.
  bool apply_accumulate(std::vector<Tensor>& grads, Tensor& into) override {
    const Tensor& g = grads[0];
    if (into.dtype() != g.dtype() || into.device() != g.device()) return false;
    detail::backend(g).embedding_backward(g.reshape({ids_.numel(), weight_shape_[1]}), ids_, into);
    return true;
  }

 private:
  Shape weight_shape_;
  Tensor ids_;
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  detail::check_float(weight, "embedding", "weight", kernels::Op::Embedding);
  TESSEL_CHECK(weight.ndim() == 2, "embedding: weight ", detail::describe(weight),
               " must be 2-D [num_embeddings, dim]");
  TESSEL_CHECK(ids.defined() && (ids.dtype() == DType::I32 || ids.dtype() == DType::I64),
               "embedding: ids ", detail::describe(ids), " must be i32 or i64");
  TESSEL_CHECK(ids.device() == weight.device(), "embedding: ids on ", ids.device().str(),
               ", weight on ", weight.device().str());
  Tensor flat_ids = ids.reshape({ids.numel()});
  Tensor out = empty({ids.numel(), weight.size(1)}, weight.dtype(), weight.device());
  detail::backend(weight).embedding(weight, flat_ids, out);
  Shape shape = ids.shape();
  shape.push_back(weight.size(1));
  Tensor y = out.reshape(shape);
  if (autograd::needs_grad({weight}))
    autograd::record(std::make_shared<EmbeddingBackward>(weight, flat_ids), {weight}, {y});
  return y;
}

}  // namespace tessel::ops
