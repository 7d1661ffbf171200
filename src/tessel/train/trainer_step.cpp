// SPDX-License-Identifier: Apache-2.0
// One optimizer step, read top to bottom in train_step: the micro-batches' forward and backward
// (or the pipeline's schedule), the gradients synchronised over the layout's axes, the global
// norm, then the update: the 1/grad_accum average, the loss scale and clipping folded into one
// scaling pass and the optimizer at the schedule's learning rate. Each phase calls the hooks of
// the layout's axes (strategy/axis_strategy.h) in list order; a one-process run has none. A step
// whose loss or gradient norm is not finite changes no parameter; it is counted, and too many in a
// row end the run with an Error. Fault injection and the step's metrics are phases of their own.
#include <time.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <iostream>
#include <limits>

#include "tessel/autograd/engine.h"
#include "tessel/ops/ops.h"
#include "tessel/tensor/allocator.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

namespace {

using Clock = std::chrono::steady_clock;

// Seconds on the steady clock (the step's duration is a difference of two).
double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// CPU seconds of this process, all threads: a step's own work on a machine shared with other
// jobs, where the wall clock also counts the waits for a core.
double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace

bool Trainer::train_step(StepRecord& r) {
  const int64_t step = step_ + 1;
  r.step = step;
  const double cpu_start_s = process_cpu_s();
  // The gradients hold the sum over micro-batches; their mean is 1/grad_accum of it.
  const double inv_accum = 1.0 / double(config_.train.grad_accum);
  const StepMarks marks = begin_step();
  const double loss_sum = forward_backward(r);  // micro-batches, or the pipeline's schedule
  sync_gradients(r);                            // every axis, in list order
  r.step_peak_bytes = int64_t(cpu_allocator().peak_bytes()) - marks.base_bytes;
  inject_faults(step);
  r.grad_norm = global_norm() * inv_accum;  // every element once
  r.loss = dp_mean(loss_sum) * inv_accum;
  if (r.has_experts) {
    r.aux_loss = dp_mean(r.aux_loss);
    reduce_expert_load(r);
  }
  r.lr = schedule_.at(step);
  update(r, step);
  end_step(r, step, marks);
  r.step_cpu_ms = (process_cpu_s() - cpu_start_s) * 1e3;
  return !r.skipped;
}

Trainer::StepMarks Trainer::begin_step() {
  StepMarks marks;
  marks.start_s = now_s();
  breakdown_begin();
  for (AxisStrategy* s : strategies_) s->begin_step();
  // One process offloaded: the gradients are chunk views, dropped there (under dp they are ZeRO's).
  if (!offload_adamw_) model_->zero_grad();
  zero_plain_gradients();
  marks.base_bytes = int64_t(cpu_allocator().bytes_in_use());
  cpu_allocator().reset_peak();  // the step's own peak, for activation memory
  return marks;
}

double Trainer::forward_backward(StepRecord& r) {
  const int64_t accum = config_.train.grad_accum;
  // What every axis holds while micro-batches run (the 16-bit weight copies).
  const auto scopes = [this] {
    std::vector<std::shared_ptr<void>> held;
    for (AxisStrategy* s : strategies_) held.push_back(s->micro_batch_scope());
    return held;
  };
  if (pipeline_) {
    std::vector<io::TokenBatch> batches;
    for (int64_t m = 0; m < accum; ++m) batches.push_back(loader_->next());
    // The schedule runs the backwards; nothing synchronises inside it (each chunk's last backward
    // comes at a different point of it), and every axis finishes after it.
    for (AxisStrategy* s : strategies_) s->before_backward(false);
    const double loss_scale = precision_ ? precision_->step_scale() : 1.0;
    const double loss_sum = pipeline_->forward_backward(std::move(batches), loss_scale, scopes);
    for (AxisStrategy* s : strategies_) s->after_backward();
    if (model_->model_config().has_experts()) add_stage_expert_loads(r);
    return loss_sum;
  }
  double loss_sum = 0;
  for (int64_t m = 0; m < accum; ++m) {
    const io::TokenBatch batch = loader_->next();
    begin_micro_batch(m);
    const auto held = scopes();
    const Tensor loss = compute_loss(batch.x, batch.y);
    loss_sum += host_scalar(loss);
    Tensor start = loss;  // what backward starts from (scaled under fp16)
    if (const Tensor aux = model_->auxiliary_loss(); aux.defined()) {
      start = ops::add(loss, aux.to(loss.dtype()));
      add_expert_load(r, aux.item(), accum, model_->expert_stats());
    }
    for (AxisStrategy* s : strategies_) {
      start = s->loss_for_backward(start);
      s->before_backward(m == accum - 1);
    }
    autograd::backward(start);
    for (AxisStrategy* s : strategies_) s->after_backward();
  }
  return loss_sum;
}

void Trainer::begin_micro_batch(int64_t m) {
  // Layout-invariant dropout: the masks of the step about to run are keyed by the step, and
  // micro-batch m's rows are the m-th block of its rows (core/positional_draws.h), never by
  // what this rank drew before (docs/PARALLEL.md, "Dropout").
  TESSEL_CHECK(m >= 0 && m < (int64_t(1) << 32), "train: micro-batch ", m, " out of range");
  rng_.set_state(rng_.seed(), (uint64_t(step_ + 1) << 32) | uint64_t(m));
}

void Trainer::zero_plain_gradients() {
  // An offloaded last pipeline stage: its copy of a tied embedding is plain memory, its gradient
  // the head's, sent to the first stage every step.
  if (!offload_adamw_ || !pipeline_) return;
  for (const std::string& name : pipeline_->tied())
    if (Tensor w = model_->find(name); !offload_->in_chunks(w)) w.set_grad(Tensor());
}

void Trainer::sync_gradients(StepRecord& r) {
  breakdown_after_backward();
  for (AxisStrategy* s : strategies_) s->sync_gradients(r);
}

double Trainer::global_norm() {
  if (offload_adamw_ && !tensor_ && !pipeline_) {  // one process; read chunk by chunk
    const double total = offload_adamw_->gradient_square_sum();
    local_nonfinite_ = !std::isfinite(total);
    return std::sqrt(total);
  }
  GradNormPlan plan;
  // Offloaded under tp or pp: each rank's gradients are chunk views, in the in-memory optimizer's
  // order.
  plan.spans =
      offload_adamw_ ? offload_adamw_->gradient_spans() : optimizer_->parameter_gradients();
  for (AxisStrategy* s : strategies_) s->describe_norm(plan);
  // Offloaded under dp: ZeRO-2/3's gradient shards are read one chunk at a time (under tp every
  // gradient chunk).
  const GlobalSquareSum sum = global_square_sum(plan.spans, plan.groups, plan.norm_axes(),
                                                offload_ ? offload_->gradient_hold() : SpanHold());
  // fp16 agrees on overflows over every axis from this (the norm leaves some ranks' parts out).
  local_nonfinite_ = sum.local_nonfinite;
  return std::sqrt(sum.total);
}

void Trainer::inject_faults(int64_t step) {
  if (hooks_.after_backward) hooks_.after_backward(step);
  if (config_.fault.nan_at_step == step) {
    // The first element of the gradient the optimizer will read (a ZeRO-2/3 shard included).
    for (const GradSpan& g : optimizer_->gradients()) {
      if (g.begin == g.end) continue;
      g.flat.data<float>()[g.begin] = std::numeric_limits<float>::quiet_NaN();
      break;
    }
  }
  if (config_.fault.kill_at_step == step) {
    std::cout.flush();
    std::raise(SIGKILL);  // a real kill -9: no handler, no flush, no checkpoint
  }
}

void Trainer::update(StepRecord& r, int64_t step) {
  bool overflow = false;  // fp16: the axis unscales grad_norm and agrees on an overflow
  for (AxisStrategy* s : strategies_)
    if (s->skip_update(r, local_nonfinite_)) overflow = true;
  r.skipped = overflow || !std::isfinite(r.loss) || !std::isfinite(r.grad_norm);
  if (overflow) {
    ++skipped_;  // never counted toward train.max_bad_steps
    return;
  }
  if (r.skipped) {
    ++skipped_;
    ++bad_in_a_row_;
    print("warning: step " + std::to_string(step) + " skipped: loss " + std::to_string(r.loss) +
          ", grad norm " + std::to_string(r.grad_norm) + " (non-finite; no update, " +
          std::to_string(bad_in_a_row_) + " in a row)");
    const int64_t limit = config_.train.max_bad_steps;
    TESSEL_CHECK(bad_in_a_row_ < limit, "train: ", bad_in_a_row_,
                 " non-finite steps in a row (train.max_bad_steps = ", limit,
                 "), the last at step ", step,
                 "; lower optim.lr or raise optim.warmup_steps and "
                 "resume from the last checkpoint");
    return;
  }
  // 1/grad_accum, the loss scale and clipping in one scaling pass.
  double factor =
      1.0 / double(config_.train.grad_accum) / (precision_ ? precision_->step_scale() : 1.0);
  const double clip = config_.optim.grad_clip;
  if (clip > 0 && r.grad_norm > clip) factor *= clip / (r.grad_norm + 1e-6);
  if (factor != 1.0) optimizer_->scale_gradients(factor);
  optimizer_->step(r.lr);  // ZeRO: this rank's shard, then the parameters all-gathered
  bad_in_a_row_ = 0;
}

void Trainer::end_step(StepRecord& r, int64_t step, const StepMarks& marks) {
  const TrainSection& t = config_.train;
  for (AxisStrategy* s : strategies_) s->after_update();  // pp: the tied embedding
  if (!offload_adamw_) model_->zero_grad();               // dead weight until the next backward
  zero_plain_gradients();
  step_ = step;
  const int64_t step_tokens = t.micro_batch * t.seq_len * t.grad_accum * dp_size();
  tokens_ += step_tokens;
  r.step = step;
  r.steps = t.steps;
  r.skipped_total = skipped_;
  r.step_ms = (now_s() - marks.start_s) * 1e3;
  r.tokens = tokens_;
  r.tokens_per_s = double(step_tokens) / (r.step_ms / 1e3);
  // Against the peak of every rank together (machine.peak_gflops is one rank's).
  r.mfu = config_.machine.peak_gflops > 0
              ? flops_per_token_ * r.tokens_per_s /
                    (config_.machine.peak_gflops * 1e9 * double(layout_.world_size()))
              : 0.0;
  // Exactly the MFU when nothing is recomputed (x*f/f need not round back to x).
  r.hfu = recompute_flops_per_token_ > 0
              ? r.mfu * (flops_per_token_ + recompute_flops_per_token_) / flops_per_token_
              : r.mfu;
  for (AxisStrategy* s : strategies_) s->record(r);
  breakdown(r);
  const parallel::MemoryReport mem = memory_report();
  r.param_bytes = mem.param_bytes;
  r.grad_bytes = mem.grad_bytes;
  r.optimizer_bytes = mem.optimizer_bytes;
  r.comm_bytes = mem.comm_bytes;
  r.gathered_peak_bytes = mem.peak_gathered_bytes;
  r.state_bytes = mem.total();
  r.expected_state_bytes = mem.expected_total();
  r.mem_bytes = int64_t(cpu_allocator().bytes_in_use());
  int64_t peak = int64_t(cpu_allocator().peak_bytes());
  if (offload_) {
    // The tiers' pools hold the state outside the CPU allocator: their bytes count too (the
    // peak adds each pool's own, an upper bound of the moments' sum).
    for (memory::Tier tier : {memory::Tier::Device, memory::Tier::Host}) {
      const memory::BudgetedPool& pool = offload_->chunks().pool(tier);
      r.mem_bytes += int64_t(pool.bytes_in_use());
      peak += int64_t(pool.peak_bytes());
    }
  }
  run_peak_bytes_ = std::max(run_peak_bytes_, peak);
  r.mem_peak_bytes = run_peak_bytes_;
  record_memory(r);
  r.predicted = prediction_;
}

parallel::MemoryReport Trainer::memory_report() const {
  parallel::MemoryReport m;
  if (zero_) {
    m = zero_->memory();
    if (expert_zero_) {  // --ep: the experts' blocks over their own group, beside the dense ones
      const parallel::MemoryReport e = expert_zero_->memory();
      m.parameter_count += e.parameter_count;
      m.param_bytes += e.param_bytes;
      m.grad_bytes += e.grad_bytes;
      m.optimizer_bytes += e.optimizer_bytes;
      m.comm_bytes += e.comm_bytes;
      m.expected_param_bytes += e.expected_param_bytes;
      m.expected_grad_bytes += e.expected_grad_bytes;
      m.expected_optimizer_bytes += e.expected_optimizer_bytes;
    }
  } else {
    // What this rank trains: under pp its stages' parameters (the model's others are shape-only:
    // no storage), under tp its pieces.
    m.dp = dp_size();
    m.stage = 0;
    for (const auto& [name, p] : trainable_parameters()) {
      m.parameter_count += p.numel();
      m.param_bytes += int64_t(p.nbytes());
    }
    // Without ZeRO every rank holds whole gradients during a step (in its buckets under dp). One
    // process offloaded: the gradients are chunk views freed after every update, so they hold no
    // bytes between steps (the tiers count them while held), as dp's offloaded shards.
    m.grad_bytes = ddp() ? ddp()->gradient_bytes() : offload_adamw_ ? 0 : m.param_bytes;
    m.optimizer_bytes = optimizer_->state_bytes();
    m.expected_param_bytes = 4 * m.parameter_count;
    m.expected_grad_bytes = 4 * m.parameter_count;
    m.expected_optimizer_bytes = 8 * m.parameter_count;
  }
  // The last pipeline stage's copy of a tied embedding, and the gradient its head computes for
  // it: held whole beside the formula's share (no moments: the first stage updates it).
  if (pipeline_ && layout_.pp_size() > 1 && layout_.pp_rank() == layout_.pp_size() - 1) {
    for (const std::string& name : pipeline_->tied()) {
      const Tensor w = model_->find(name);
      m.param_bytes += int64_t(w.nbytes());
      m.expected_param_bytes += 4 * w.numel();
      m.expected_grad_bytes += 4 * w.numel();
    }
  }
  return m;
}

}  // namespace tessel::train
