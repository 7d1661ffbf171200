// SPDX-License-Identifier: Apache-2.0
#include "tessel/nn/moe_experts.h"

#include "tessel/nn/init.h"
#include "tessel/nn/quantized.h"
#include "tessel/ops/ops.h"
#include "tessel/ops/quant_grouped_linear.h"
#include "tessel/tensor/unallocated.h"

namespace tessel::nn {

namespace {

// A new parameter, uninitialised: shape-only while a DeferInit lives (no address space until the
// rank that holds it materialises it: tensor/unallocated.h), else allocated.
Tensor parameter_tensor(const Shape& shape, DType dtype) {
  return init::deferred_record() != nullptr ? unallocated(shape, dtype) : empty(shape, dtype);
}

// Under init::DeferInit (construction without materialisation) the values are only described,
// the generator's offsets reserved as normal_ reserves them, as nn::Linear's are.
Tensor weight(const Shape& shape, const Init& init) {
  Tensor t = parameter_tensor(shape, init.dtype);
  if (init.kind != Init::Random) return t;
  if (init::InitRecord* record = init::deferred_record()) {
    Generator& g = init.generator ? *init.generator : default_generator();
    init::InitRecipe r;
    r.kind = init::InitRecipe::Normal;
    r.seed = g.seed();
    r.offset = g.reserve(uint64_t(shape.numel()));
    r.std = init.std;
    record->add(t, r);
  } else {
    init::normal_(t, init.std, init.generator);
  }
  return t;
}

Tensor zero_bias(const Shape& shape, const Init& init) {
  Tensor t = parameter_tensor(shape, init.dtype);
  if (init.kind != Init::Random) return t;
  if (init::InitRecord* record = init::deferred_record()) {
    record->add(t, init::InitRecipe{});  // Constant 0
  } else {
    t.fill(0.0);
  }
  return t;
}

}  // namespace

ExpertMLPs::ExpertMLPs(int64_t experts, int64_t hidden, int64_t ffn_hidden, ExpertKind kind,
                       Init init)
    : Module("ExpertMLPs"),
      experts_(experts),
      hidden_(hidden),
      ffn_hidden_(ffn_hidden),
      kind_(kind) {
  TESSEL_CHECK(experts > 0 && hidden > 0 && ffn_hidden > 0, "ExpertMLPs: experts ", experts,
               ", hidden ", hidden, " and ffn_hidden ", ffn_hidden, " must be > 0");
  if (kind == ExpertKind::SwiGLU) {
    gate_proj = register_parameter("gate_proj", weight({experts, ffn_hidden, hidden}, init));
    up_proj = register_parameter("up_proj", weight({experts, ffn_hidden, hidden}, init));
    down_proj = register_parameter("down_proj", weight({experts, hidden, ffn_hidden}, init));
  } else {
    fc_weight = register_parameter("fc_weight", weight({experts, ffn_hidden, hidden}, init));
    fc_bias = register_parameter("fc_bias", zero_bias({experts, ffn_hidden}, init));
    proj_weight = register_parameter("proj_weight", weight({experts, hidden, ffn_hidden}, init));
    proj_bias = register_parameter("proj_bias", zero_bias({experts, hidden}, init));
  }
}

namespace {

// Rebinds `t` to rows [first, first + count) of its dim `dim`, in its own memory. Rebinding the
// shared implementation keeps every handle (the registry's, the module's member) valid. A
// shape-only tensor (construction without materialisation) keeps a shape-only part.
void keep_part(Tensor& t, int dim, int64_t first, int64_t count) {
  // GGUF blocks (i8 stacks, inference) stay a view of the mapped file: only this part's pages are
  // ever read.
  const Tensor piece =
      !t.storage().is_materialized()       ? unallocated(t.shape().with(dim, count), t.dtype())
      : t.dtype() == DType::I8 && dim == 0 ? t.detach().narrow(0, first, count)
                                           : t.detach().slice(dim, first, first + count);  // a copy
  TensorImpl& impl = *t.impl_ptr();
  impl.storage = piece.storage_ptr();
  impl.offset = piece.offset();
  impl.shape = piece.shape();
  impl.grad.reset();
}

}  // namespace

void ExpertMLPs::keep_experts(int64_t first, int64_t count) {
  TESSEL_CHECK(first_ == 0 && first >= 0 && count >= 1 && first + count <= experts_,
               "ExpertMLPs: cannot keep experts [", first, ", ", first + count, ") of ", experts_,
               first_ != 0 ? " (already a part of a layer)" : "");
  for (Tensor* t :
       {&gate_proj, &up_proj, &down_proj, &fc_weight, &fc_bias, &proj_weight, &proj_bias})
    if (t->defined()) keep_part(*t, 0, first, count);
  first_ = first;
  experts_ = count;
}

std::array<ExpertMLPs::Stack, 5> ExpertMLPs::stacks() {
  return {Stack{"gate_proj", &gate_proj, ffn_hidden_, hidden_},
          Stack{"up_proj", &up_proj, ffn_hidden_, hidden_},
          Stack{"down_proj", &down_proj, hidden_, ffn_hidden_},
          Stack{"fc_weight", &fc_weight, ffn_hidden_, hidden_},
          Stack{"proj_weight", &proj_weight, hidden_, ffn_hidden_}};
}

size_t ExpertMLPs::stack_index(const std::string& name) {
  const auto all = stacks();
  for (size_t k = 0; k < all.size(); ++k)
    if (name == all[k].name && all[k].weight->defined()) return k;
  TESSEL_FAIL(
      "ExpertMLPs '", path(), "' has no stacked weight '", name, "' (",
      kind_ == ExpertKind::SwiGLU ? "gate_proj, up_proj, down_proj" : "fc_weight, proj_weight",
      ")");
}

void ExpertMLPs::set_quantized(const std::string& name, kernels::quant::QuantType type,
                               const Tensor& blocks) {
  const size_t k = stack_index(name);
  const Stack s = stacks()[k];
  TESSEL_CHECK(!quant_[k], "ExpertMLPs '", path(), "': ", name, " is already quantized");
  bind_quantized_stack(*s.weight, type, blocks, experts_, s.out, s.in,
                       "ExpertMLPs '" + path() + "' " + name);
  quant_[k] = type;
}

void ExpertMLPs::dequantize() {
  const auto all = stacks();
  for (size_t k = 0; k < quant_.size(); ++k) {
    if (!quant_[k]) continue;
    dequantize_stack(*all[k].weight, *quant_[k], experts_, all[k].out, all[k].in);
    quant_[k].reset();
  }
}

std::optional<kernels::quant::QuantType> ExpertMLPs::quant_type(const std::string& name) const {
  const auto all = const_cast<ExpertMLPs*>(this)->stacks();
  for (size_t k = 0; k < all.size(); ++k)
    if (name == all[k].name) return quant_[k];
  return std::nullopt;
}

bool ExpertMLPs::quantized() const {
  for (const auto& q : quant_)
    if (q) return true;
  return false;
}

// One projection of the experts: grouped GEMM on a float stack, or the quantized grouped product
// on blocks.
Tensor ExpertMLPs::project(const Tensor& x, const std::string& name, const Tensor& offsets) {
  const size_t k = stack_index(name);
  const Stack s = stacks()[k];
  if (!quant_[k]) return ops::grouped_linear(x, *s.weight, offsets);
  check_quantized_inference(*this, *quant_[k]);
  return ops::quant_grouped_linear(x, *quant_[k], *s.weight, s.in, offsets);
}

void ExpertMLPs::keep_ffn(int64_t first, int64_t count,
                          std::shared_ptr<ExpertTensorRegion> region) {
  TESSEL_CHECK(region_ == nullptr && region != nullptr && first >= 0 && count >= 1 &&
                   first + count <= ffn_hidden_ && !quantized(),
               "ExpertMLPs: cannot keep FFN columns [", first, ", ", first + count, ") of ",
               ffn_hidden_, region_ != nullptr ? " (already split)" : "",
               region == nullptr ? " without a region to sum the pieces" : "",
               quantized() ? " (its stacks are GGUF blocks: inference only)" : "");
  // [E, F, C] and [E, F]: rows of dim 1; [E, C, F]: columns of dim 2. proj_bias stays whole.
  for (Tensor* t : {&gate_proj, &up_proj, &fc_weight, &fc_bias})
    if (t->defined()) keep_part(*t, 1, first, count);
  for (Tensor* t : {&down_proj, &proj_weight})
    if (t->defined()) keep_part(*t, 2, first, count);
  ffn_first_ = first;
  ffn_hidden_ = count;
  region_ = std::move(region);
}

Tensor ExpertMLPs::forward(const Tensor& x, const Tensor& offsets, const Tensor& expert_of_row) {
  return run_forward({x}, [&] {
    // Split over tp: every rank's columns see the same rows (f), and the down projections' partial
    // sums are added over the ranks once for all experts (g), before the output bias, which is
    // then added once as after Megatron's row-parallel all-reduce.
    const Tensor in = region_ ? region_->enter(x) : x;
    auto joined = [&](const Tensor& partial) {
      return region_ ? region_->reduce(partial) : partial;
    };
    if (kind_ == ExpertKind::SwiGLU) {
      Tensor g = project(in, "gate_proj", offsets);
      Tensor u = project(in, "up_proj", offsets);
      return joined(project(ops::mul(ops::silu(g), u), "down_proj", offsets));
    }
    Tensor h = ops::add(project(in, "fc_weight", offsets), ops::embedding(fc_bias, expert_of_row));
    return ops::add(joined(project(ops::gelu(h), "proj_weight", offsets)),
                    ops::embedding(proj_bias, expert_of_row));
  });
}

DenseMLP::DenseMLP(int64_t hidden, int64_t ffn_hidden, ExpertKind kind, Init init)
    : Module("DenseMLP"), kind_(kind) {
  if (kind == ExpertKind::SwiGLU) {
    gate_proj =
        register_module("gate_proj", std::make_shared<Linear>(hidden, ffn_hidden, false, init));
    up_proj = register_module("up_proj", std::make_shared<Linear>(hidden, ffn_hidden, false, init));
    down_proj =
        register_module("down_proj", std::make_shared<Linear>(ffn_hidden, hidden, false, init));
  } else {
    c_fc = register_module("c_fc", std::make_shared<Linear>(hidden, ffn_hidden, true, init));
    c_proj = register_module("c_proj", std::make_shared<Linear>(ffn_hidden, hidden, true, init));
  }
}

Tensor DenseMLP::forward(const Tensor& x) {
  return run_forward({x}, [&] {
    if (kind_ == ExpertKind::SwiGLU)
      return down_proj->forward(ops::mul(ops::silu(gate_proj->forward(x)), up_proj->forward(x)));
    return c_proj->forward(ops::gelu(c_fc->forward(x)));
  });
}

}  // namespace tessel::nn
