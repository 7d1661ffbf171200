// SPDX-License-Identifier: Apache-2.0
// OffloadAdamW: rows of chunks (parameters, gradients, both moments) accessed in the host tier
// and updated by the backend's adamw; the chunk manager's trace makes the rows' NVMe reads
// arrive ahead of their turn. Under mixed precision each updated master is rounded into its
// 16-bit copy's chunk right away, while the row is in the host tier.
#include "tessel/train/optim/offload_adamw.h"

#include <cmath>
#include <map>

#include "tessel/autograd/backend_scope.h"
#include "tessel/core/error.h"
#include "tessel/kernels/backend.h"
#include "tessel/nn/autocast.h"

namespace tessel::train {

using memory::AccessMode;
using memory::ChunkState;
using memory::Tier;

OffloadAdamW::OffloadAdamW(memory::ChunkManager& chunks, std::vector<OffloadedParameter> params,
                           const AdamWOptions& options)
    : chunks_(chunks), params_(std::move(params)), options_(options) {
  const AdamWOptions& o = options_;
  kernels::check_adamw_hyperparameters("offloaded AdamW", o.beta1, o.beta2, o.eps, o.weight_decay);
  std::map<int, size_t> row_of;
  for (size_t i = 0; i < params_.size(); ++i) {
    const OffloadedParameter& p = params_[i];
    TESSEL_CHECK(p.param.dtype() == DType::F32, "offloaded AdamW: parameter '", p.name, "' is ",
                 dtype_name(p.param.dtype()), ", expected f32");
    decay_.push_back(AdamW::decays(p.name, p.param.shape()));
    const int pc = chunks_.chunk_of(p.param);
    auto [it, fresh] = row_of.emplace(pc, rows_.size());
    if (fresh) {
      rows_.push_back({pc,
                       chunks_.chunk_of(p.grad),
                       chunks_.chunk_of(p.exp_avg),
                       chunks_.chunk_of(p.exp_avg_sq),
                       {}});
    }
    Row& r = rows_[it->second];
    // The groups' chunk lists are laid out alike, so a parameter chunk's tensors share one
    // gradient chunk and one chunk of each moment.
    TESSEL_CHECK(r.grad == chunks_.chunk_of(p.grad) && r.exp_avg == chunks_.chunk_of(p.exp_avg) &&
                     r.exp_avg_sq == chunks_.chunk_of(p.exp_avg_sq),
                 "offloaded AdamW: the state of '", p.name,
                 "' is not in the chunks of the rest of its parameter chunk ", pc);
    r.members.push_back(i);
  }
}

double OffloadAdamW::gradient_square_sum() {
  std::vector<double> sums(params_.size(), 0.0);
  for (const Row& r : rows_) {
    chunks_.access(r.grad, AccessMode::Read, Tier::Host);
    std::vector<Tensor> views;
    for (size_t i : r.members) views.push_back(params_[i].grad.flatten());
    std::vector<double> part(views.size(), 0.0);
    if (!views.empty()) autograd::backend_for(views.front().device()).square_sums(views, part);
    for (size_t k = 0; k < r.members.size(); ++k) sums[r.members[k]] = part[k];
    chunks_.release(r.grad, ChunkState::HoldAfterBackward);
  }
  double total = 0;  // in parameter order, as global_square_sum adds its spans
  for (double s : sums) total += s;
  return total;
}

std::vector<GradSpan> OffloadAdamW::gradient_spans() const {
  std::vector<GradSpan> spans;
  spans.reserve(params_.size());
  for (const OffloadedParameter& p : params_) spans.push_back(whole_span(p.grad, 0, p.name));
  return spans;
}

void OffloadAdamW::step(double lr) {
  TESSEL_CHECK(std::isfinite(lr) && lr >= 0,
               "offloaded AdamW.step: lr must be finite and >= 0, got ", lr);
  ++step_;
  kernels::AdamWParams h{lr, options_.beta1, options_.beta2, options_.eps, 0.0, step_};
  for (const Row& r : rows_) {
    chunks_.access(r.param, AccessMode::ReadWrite, Tier::Host);
    chunks_.access(r.grad, scale_ != 1.0 ? AccessMode::ReadWrite : AccessMode::Read, Tier::Host);
    chunks_.access(r.exp_avg, AccessMode::ReadWrite, Tier::Host);
    chunks_.access(r.exp_avg_sq, AccessMode::ReadWrite, Tier::Host);
    int copy_chunk = -1;  // mixed precision: the 16-bit copies' chunk being written
    for (size_t i : r.members) {
      OffloadedParameter& p = params_[i];
      kernels::Backend& backend = autograd::backend_for(p.param.device());
      if (scale_ != 1.0) {
        Tensor g = p.grad.flatten();  // as scale_spans multiplies a whole gradient's span
        backend.unary(kernels::UnaryOp::Scale, g, g, scale_);
      }
      h.weight_decay = decay_[i] ? options_.weight_decay : 0.0;
      backend.adamw(p.param, p.grad, p.exp_avg, p.exp_avg_sq, h);
      if (!p.copy.defined()) continue;
      // The next forward's copy, rounded as the in-memory scope's cast rounds it. A row's copies
      // (half its bytes) may straddle two chunks of their list: one is held at a time.
      const int cc = chunks_.chunk_of(p.copy);
      if (cc != copy_chunk) {
        if (copy_chunk >= 0) chunks_.release(copy_chunk);
        copy_chunk = -1;
        chunks_.access(cc, AccessMode::ReadWrite, Tier::Host);
        copy_chunk = cc;
      }
      nn::LowPrecisionScope::recast(p.param, p.copy);
    }
    if (copy_chunk >= 0) chunks_.release(copy_chunk);
    chunks_.release(r.exp_avg_sq);
    chunks_.release(r.exp_avg);
    chunks_.release(r.grad);
    chunks_.release(r.param);
    chunks_.free(r.grad);  // consumed: the next backward starts from zeros
  }
  scale_ = 1.0;
}

void OffloadAdamW::set_step_count(int64_t step) {
  TESSEL_CHECK(step >= 0, "offloaded AdamW: step count must be >= 0, got ", step);
  step_ = step;
}

void OffloadAdamW::drop_gradients() {
  for (const Row& r : rows_)
    if (chunks_.chunk(r.grad).state != ChunkState::Free) chunks_.free(r.grad);
  scale_ = 1.0;
}

int64_t OffloadAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const OffloadedParameter& p : params_)
    bytes += int64_t(p.exp_avg.nbytes() + p.exp_avg_sq.nbytes());
  return bytes;
}

}  // namespace tessel::train
