// SPDX-License-Identifier: Apache-2.0
// Runs one training step of a model built on the meta device and records every kernel event
// into a plan::Graph (see trace.h).
#include "tessel/plan/trace.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "tessel/autograd/engine.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/meta.h"
#include "tessel/autograd/scope.h"
#include "tessel/nn/autocast.h"
#include "tessel/plan/trace_recorder.h"
#include "tessel/tensor/default_device.h"
#include "tessel/tensor/meta_allocator.h"

namespace tessel::plan {

std::vector<int64_t> blocks_of_layers(int64_t num_layers, int64_t begin, int64_t end) {
  std::vector<int64_t> out;
  for (int64_t l = std::max<int64_t>(begin, 1); l < std::min(end, num_layers + 1); ++l)
    out.push_back(l - 1);
  return out;
}

std::vector<int64_t> rank_blocks(const PipelineRank& rank, int64_t num_layers) {
  std::vector<int64_t> out;
  for (int s = 0; s < rank.num_stages(); ++s) {
    if (rank.owner(s) != rank.rank) continue;
    const auto [begin, end] = rank.stage_layers[size_t(s)];
    const std::vector<int64_t> b = blocks_of_layers(num_layers, begin, end);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

Graph trace_training_step(const models::ModelConfig& config, const TraceOptions& options) {
  const int64_t seq = options.seq > 0 ? options.seq : config.max_positions();
  TESSEL_CHECK(options.batch >= 1, "trace: batch ", options.batch, " must be >= 1");
  TESSEL_CHECK(seq <= config.max_positions(), "trace: seq ", seq, " exceeds the model's ",
               config.max_positions(), " positions");
  TESSEL_CHECK(options.compute_dtype == DType::F32 || options.compute_dtype == DType::BF16 ||
                   options.compute_dtype == DType::F16,
               "trace: compute dtype ", dtype_name(options.compute_dtype),
               " is not one of f32, bf16, f16");

  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (options.transform) options.transform(*model);
  models::set_rank_recompute(*model, options.recompute, options.recompute_blocks,
                             blocks_of_layers(model->num_layers(), 1, model->num_layers() + 1),
                             options.recompute_rest);
  model->train(options.dropout);

  Graph graph;
  std::map<std::string, int> index;
  std::vector<int> stack;
  std::vector<std::pair<nn::Module*, int64_t>> hooks;
  for (auto& [path, module] : model->named_modules()) {
    const int id = int(graph.modules.size());
    const size_t dot = path.rfind('.');
    int parent = -1;
    if (!path.empty()) parent = index.at(dot == std::string::npos ? "" : path.substr(0, dot));
    graph.modules.push_back({path, module->type_name(), parent});
    index[path] = id;
    hooks.emplace_back(module, module->register_forward_pre_hook(
                                   [id, &stack](nn::Module&, const std::vector<Tensor>&) {
                                     stack.push_back(int(autograd::exchange_scope(id)));
                                   }));
    hooks.emplace_back(module, module->register_forward_hook(
                                   [&stack](nn::Module&, const std::vector<Tensor>&, Tensor&) {
                                     autograd::exchange_scope(stack.back());
                                     stack.pop_back();
                                   }));
  }
  graph.saved_bytes_by_module.assign(graph.modules.size(), 0.0);

  std::set<const void*> parameters;
  for (const Tensor& p : model->parameters()) {
    if (parameters.insert(p.storage_ptr().get()).second) {
      graph.parameter_bytes += double(p.storage().nbytes());
      graph.parameter_count += p.numel();
      ++graph.parameter_tensors;
    }
  }
  // Buffers are model state, not activations, wherever an op keeps one.
  for (const auto& [name, b] : model->named_buffers()) parameters.insert(b.storage_ptr().get());

  Recorder recorder(graph, options.half_stand_ins, options.unfused_attention);
  std::set<const void*> saved;
  auto on_saved = [&](const Tensor& t) {
    if (recorder.backward()) return;  // a recomputation's own tensors live only in backward
    const void* storage = t.storage_ptr().get();
    if (parameters.contains(storage) || !saved.insert(storage).second) return;
    const double bytes = double(t.storage().nbytes());
    graph.saved_bytes += bytes;
    const int64_t scope = autograd::current_scope();
    if (scope >= 0)
      graph.saved_bytes_by_module[size_t(scope)] += bytes;
    else
      graph.saved_bytes_outside += bytes;
  };

  DataParallelRun dp;
  if (options.data_parallel) {
    std::vector<std::string> trained;
    for (const auto& [name, p] : model->named_parameters()) trained.push_back(name);
    dp = options.data_parallel(*model, trained);
  } else if (options.gradients_held) {
    for (Tensor& p : model->parameters())
      if (!p.grad().defined()) p.set_grad(zeros(p.shape(), DType::F32));
  }
  Tensor gradient_buffer;  // TraceOptions::first_gradient_bytes, from the first gradient on
  std::vector<std::pair<Tensor, int64_t>> grad_hooks;
  if (options.first_gradient_bytes > 0)
    for (const Tensor& p : model->parameters())
      grad_hooks.emplace_back(p, autograd::register_grad_ready_hook(p, [&](const Tensor&) {
                                if (!gradient_buffer.defined())
                                  gradient_buffer = empty(
                                      {int64_t(options.first_gradient_bytes / 4)}, DType::F32);
                              }));
  // The step begins before the batch is loaded, as the trainer's step peak does.
  const double step_base = double(meta_allocator().bytes_in_use());
  meta_allocator().reset_peak();
  // The 16-bit weight copies, made per micro-batch as the trainer's precision axis makes them
  // (under ZeRO-3 each unit's when it is gathered).
  auto low_precision = [&](std::optional<nn::LowPrecisionScope>& scope) {
    if (options.compute_dtype == DType::F32) return;
    autograd::ScopeGuard root(0);  // the weight casts belong to the model
    scope.emplace(std::vector<nn::Module*>{model.get()}, options.compute_dtype, dp.defer);
    if (dp.set_low_precision) dp.set_low_precision(&*scope);
  };
  auto end_low_precision = [&](std::optional<nn::LowPrecisionScope>& scope) {
    if (scope && dp.set_low_precision) dp.set_low_precision(nullptr);
    scope.reset();
  };
  auto loss_of = [&](const Tensor& ids, const Tensor& targets) {
    return options.loss ? options.loss(model->forward(ids), targets) : model->loss(ids, targets);
  };
  if (options.micro_batches > 1) {
    // The accumulating micro-batches before the traced one: no communication, gradients summed
    // into the buffers the last one reduces (without data parallelism, the gradients the first
    // backward allocated inside the step, which the later ones' activations come on top of). Not
    // recorded.
    Tensor ids = empty({options.batch, seq}, DType::I64);
    Tensor targets = empty({options.batch, seq}, DType::I64);
    std::optional<nn::LowPrecisionScope> autocast;
    low_precision(autocast);
    Tensor loss = loss_of(ids, targets);
    if (dp.before_backward) dp.before_backward(false);
    Tensor seed;
    {
      autograd::NoGradGuard no_grad;
      seed = ones(loss.shape(), loss.dtype());
    }
    autograd::backward({loss}, {seed});
    if (dp.after_backward) dp.after_backward();
    end_low_precision(autocast);
  }
  Tensor ids = empty({options.batch, seq}, DType::I64);
  Tensor targets = empty({options.batch, seq}, DType::I64);
  {
    kernels::KernelObserverScope observe(recorder);
    dist::MetaCallObserverScope observe_calls(recorder.collective_observer());
    autograd::SavedTensorObserverScope observe_saved(on_saved);
    std::optional<nn::LowPrecisionScope> autocast;
    low_precision(autocast);
    // The 16-bit weight copies are made once per step, before the forward; the linear layers
    // save them, but they are weights, not activations.
    for (const void* storage : recorder.written()) parameters.insert(storage);
    Tensor loss;
    {
      // The loss belongs to the model: the root module's scope.
      autograd::ScopeGuard root(0);
      loss = loss_of(ids, targets);
    }
    if (dp.before_backward) dp.before_backward(true);
    recorder.set_backward();
    Tensor seed;
    {
      // Made here with grad mode off, so that only a checkpoint's recomputation runs with it on.
      autograd::NoGradGuard no_grad;
      autograd::ScopeGuard root(0);
      seed = ones(loss.shape(), loss.dtype());
    }
    autograd::backward({loss}, {seed});
    if (dp.after_backward) dp.after_backward();
    end_low_precision(autocast);
    if (dp.finish) dp.finish();  // the trainer reads its step peak after the gradient sync
  }
  graph.step_peak_bytes =
      std::max(double(meta_allocator().peak_bytes()), recorder.kernel_peak()) - step_base;
  for (auto& [module, handle] : hooks) module->remove_hook(handle);
  for (auto& [p, handle] : grad_hooks) autograd::remove_grad_ready_hook(p, handle);
  return graph;
}

}  // namespace tessel::plan
