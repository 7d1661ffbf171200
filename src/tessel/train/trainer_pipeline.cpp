// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism in the Trainer (GPipe, 1F1B, interleaved 1F1B; docs/PARALLEL.md). Every pp
// rank builds the whole model from the same seed, then trains only the parameters of its stages:
// the optimizer, data parallelism and ZeRO see nothing else. A step's grad_accum micro-batches are
// the pipeline's micro-batches, so a pp run consumes exactly the batches of one process.
//
// A tied embedding (CausalLM::head_tied_parameters, GPT-2's wte): the last stage multiplies with
// its copy but does not train it; after backward it sends its gradient to the first stage, which
// adds it to its own (the sum one process forms) and alone updates it; the updated weight then goes
// back to the last stage. So the copies stay identical and the global norm and ZeRO count it once
// (the embedding group of
// Megatron-LM, as a reduce and a broadcast instead of an all-reduce).
//
// Checkpoints stay layout-independent: before one is written, every parameter and moment is
// broadcast over pp from the rank that trains it, so world rank 0 writes the usual full files; a
// resumed rank loads everything and keeps its part, whatever pp wrote the checkpoint.
//
// bf16/fp16: one LowPrecisionScope over this rank's stages spans the whole schedule (1F1B runs a
// micro-batch's backward after later forwards; the copies' casts serve every micro-batch's graph)
// and closes before the tied-gradient exchange reads the f32 weight; messages travel in the compute
// dtype; under fp16 the last stage returns loss * scale and the losses are divided back.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tessel/autograd/meta.h"
#include "tessel/io/mapped_file.h"
#include "tessel/parallel/pipeline/printer.h"
#include "tessel/parallel/pipeline/simulator.h"
#include "tessel/train/metrics/run_report.h"
#include "tessel/train/pipeline_stage.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

namespace pp = parallel::pipeline;

namespace {

// Tags above every tag the executor uses (it takes 2 * stages * micro-batches from 0).
constexpr int kTiedGradientTag = dist::Communicator::kMaxTag;
constexpr int kTiedWeightTag = dist::Communicator::kMaxTag - 1;
const std::string kMomentPrefixes[] = {"exp_avg.", "exp_avg_sq."};

}  // namespace

void Trainer::build_pipeline() {
  if (layout_.pp_size() == 1) return;
  const int p = layout_.pp_size();
  const TrainSection& t = config_.train;
  pp::Schedule schedule = schedule_from_spec(config_.parallel.schedule, p, int(t.grad_accum));
  const std::vector<pp::LayerCost> costs = pipeline_layer_costs(*model_);
  TESSEL_CHECK(int64_t(costs.size()) >= schedule.num_stages(),
               "train: parallel.schedule = ", config_.parallel.schedule, " at pp = ", p, " needs ",
               schedule.num_stages(), " stages, but the model's ", model_->num_layers(),
               " blocks has only ", costs.size(), " pipeline layers (embedding, blocks, head)");
  pipe_ = std::make_unique<PipelineTraining>();
  pipe_->stages = std::make_unique<ModelStages>(*model_, pp::balance(costs, schedule.num_stages()));
  for (const auto& [name, param] : model_->named_parameters()) {
    pipe_->owner[name] = schedule.owner(pipe_->stages->stage_of_parameter(name));
  }
  pipe_->tied = model_->head_tied_parameters();
  {
    // The modules that hold this rank's parameters (and the tied ones its head multiplies with).
    std::set<nn::Module*> seen;
    for (const auto& [name, param] : model_->named_parameters()) {
      const bool head_uses =
          std::find(pipe_->tied.begin(), pipe_->tied.end(), name) != pipe_->tied.end() &&
          schedule.owner(pipe_->stages->partition().num_stages() - 1) == layout_.pp_rank();
      if (pipe_->owner.at(name) != layout_.pp_rank() && !head_uses) continue;
      nn::Module* m = owner_module(*model_, name);
      if (seen.insert(m).second) pipe_->modules.push_back(m);
    }
  }
  pp::ExecutorOptions options;
  options.activation_shapes = {
      Shape{t.micro_batch, layout_stage_seq_len(), model_->model_config().hidden_size()}};
  options.dtype = compute_dtype_;  // bf16/fp16: the stages' activations cross in 16 bits
  layout_setup_pipeline();         // tensor parallelism inside the stages (trainer_layout.cpp)
  std::string layers;              // "embedding..h.2 | h.3..head": a stage may hold no block at all
  for (int64_t s = 0; s < pipe_->stages->partition().num_stages(); ++s) {
    const auto [begin, end] = pipe_->stages->partition().layers_of(s);
    layers += (s > 0 ? " | " : "") + costs[size_t(begin)].name;
    if (end - begin > 1) layers += ".." + costs[size_t(end - 1)].name;
  }
  pipe_->executor =
      std::make_unique<pp::PipelineExecutor>(std::move(schedule), layout_.pp, std::move(options));
  print("pipeline: " + config_.parallel.schedule + " over pp = " + std::to_string(p) + ", " +
        std::to_string(t.grad_accum) + " micro-batches per step; stages " + layers);
}

NamedTensors Trainer::trainable_parameters() const {
  NamedTensors all = model_->named_parameters();
  if (!pipe_) return all;
  std::erase_if(all,
                [&](const auto& np) { return pipe_->owner.at(np.first) != layout_.pp_rank(); });
  return all;
}

std::vector<nn::Module*> Trainer::stage_modules() const {
  if (!pipe_) return {model_.get()};
  return pipe_->modules;
}

std::vector<Tensor> Trainer::trainable_tensors() const {
  std::vector<Tensor> out;
  for (auto& [name, param] : trainable_parameters()) out.push_back(param);
  return out;
}

double Trainer::pp_sum(double value) const {
  if (!pipe_) return value;
  Tensor t = full({1}, value, DType::F64);
  layout_.pp->all_reduce(t, dist::ReduceOp::Sum);
  return t.data<double>()[0];
}

double Trainer::pipeline_forward_backward() {
  std::vector<io::TokenBatch> batches;
  for (int64_t m = 0; m < config_.train.grad_accum; ++m) batches.push_back(loader_->next());
  pipe_->stages->set_batches(std::move(batches));
  // Data parallelism averages once, after the whole schedule (every chunk's last backward comes
  // at a different point of it).
  if (ddp_) ddp_->set_sync(false);
  // fp16: the last stage's backward starts from loss * scale (a power of two, so the losses it
  // reports divide back exactly).
  step_scale_ = scaler_ ? scaler_->scale() : 1.0;
  pipe_->stages->set_loss_scale(step_scale_);
  pp::ExecutionResult result;
  {
    // One set of 16-bit copies for the step: a micro-batch's backward may come after later
    // micro-batches' forwards.
    const auto low_precision = precision_scope();
    result = pipe_->executor->run(*pipe_->stages);
  }
  const int p = layout_.pp_size(), rank = layout_.pp_rank();
  for (const std::string& name : pipe_->tied) {
    const Tensor w = model_->find(name);
    if (rank == p - 1) {
      const Tensor g = w.grad().defined() ? w.grad() : zeros_like(w);
      layout_.pp->send(g, 0, kTiedGradientTag);
    } else if (rank == 0) {
      Tensor head = empty_like(w);
      layout_.pp->recv(head, p - 1, kTiedGradientTag);
      Tensor g = w.grad();
      autograd::add_gradients_into(g, head);
    }
  }
  if (ddp_) ddp_->set_sync(true);
  double loss_sum = 0;  // in micro-batch order, as one process adds them
  for (double loss : result.losses) loss_sum += loss / step_scale_;
  pipe_->last = std::move(result);
  return pp_sum(loss_sum);
}

void Trainer::pipeline_after_step() {
  if (!pipe_ || pipe_->tied.empty()) return;
  const int p = layout_.pp_size(), rank = layout_.pp_rank();
  const auto gathered = rank == 0 ? layout_gather_tied() : nullptr;  // ZeRO-3 keeps a shard
  for (const std::string& name : pipe_->tied) {
    Tensor w = model_->find(name);
    if (rank == 0) layout_.pp->send(w, p - 1, kTiedWeightTag);
    if (rank == p - 1) layout_.pp->recv(w, 0, kTiedWeightTag);
  }
}

void Trainer::pipeline_sync_model() {
  if (!pipe_) return;
  const auto gathered = layout_gather_all();  // ZeRO-3: whole parameters while they are sent
  for (auto& [name, param] : model_->named_parameters()) {
    layout_.pp->broadcast(param, pipe_->owner.at(name));
  }
}

NamedTensors Trainer::pipeline_own_moments(const NamedTensors& full) const {
  NamedTensors own;
  for (const auto& [key, moment] : full) {
    std::string name = key;
    for (const std::string& prefix : kMomentPrefixes)
      if (key.rfind(prefix, 0) == 0) name = key.substr(prefix.size());
    const auto it = pipe_->owner.find(name);
    // Unknown names stay, so that the optimizer's own check names them.
    if (it == pipe_->owner.end() || it->second == layout_.pp_rank()) own.emplace_back(key, moment);
  }
  return own;
}

// The measured timeline of the last step next to the simulator's prediction for the same
// schedule with the measured mean forward and backward times. Collective over pp.
void Trainer::pipeline_report() {
  if (!pipe_ || !pipe_->last) return;
  const pp::Schedule& schedule = pipe_->executor->schedule();
  const auto timelines = pp::gather_timelines(*layout_.pp, schedule, pipe_->last->timeline);
  if (!leader()) return;
  const pp::Simulation measured = pp::measured_simulation(schedule, timelines);
  // Mean measured forward and backward time of every stage, and over all stages.
  const size_t stages = size_t(schedule.num_stages());
  std::vector<double> sum[2] = {std::vector<double>(stages), std::vector<double>(stages)};
  std::vector<int> count[2] = {std::vector<int>(stages), std::vector<int>(stages)};
  double all_sum[2] = {0, 0};
  int all_count[2] = {0, 0};
  for (size_t r = 0; r < timelines.size(); ++r) {
    for (const pp::TimedAction& t : timelines[r]) {
      const pp::Action& a = schedule.actions[r][size_t(t.index)];
      if (!pp::is_compute(a.kind)) continue;
      const int k = a.kind == pp::ActionKind::Forward ? 0 : 1;
      sum[k][size_t(a.stage)] += t.end - t.start;
      ++count[k][size_t(a.stage)];
      all_sum[k] += t.end - t.start;
      ++all_count[k];
    }
  }
  // Equal stages (the textbook formula's assumption) and the measured per-stage costs.
  const pp::Costs equal{all_sum[0] / std::max(all_count[0], 1),
                        all_sum[1] / std::max(all_count[1], 1), 0.0};
  pp::Costs per_stage = equal;
  for (int k = 0; k < 2; ++k) {
    auto& v = k == 0 ? per_stage.stage_forward : per_stage.stage_backward;
    for (size_t s = 0; s < stages; ++s) v.push_back(sum[k][s] / std::max(count[k][s], 1));
  }
  const pp::Simulation predicted = pp::simulate(schedule, equal);
  const pp::Simulation predicted_stages = pp::simulate(schedule, per_stage);
  char line[320];
  std::snprintf(line, sizeof line,
                "pipeline: last step %.1f ms, measured bubble %.3f; simulator %.3f with the "
                "measured per-stage times (%.1f ms predicted), %.3f with equal stages (mean "
                "forward %.2f ms, backward %.2f ms; no communication cost); peak activations in "
                "flight per rank:",
                measured.makespan, measured.bubble_fraction, predicted_stages.bubble_fraction,
                predicted_stages.makespan, predicted.bubble_fraction, equal.forward,
                equal.backward);
  std::string text = line;
  for (int peak : measured.peak_in_flight) text += " " + std::to_string(peak);
  text += "; busy per rank:";  // uneven stages show here, which equal stage costs cannot predict
  for (double busy : measured.compute_time)
    text += " " + std::to_string(int(100 * busy / measured.makespan + 0.5)) + "%";
  print(text);
  print("measured timeline (one cell = " + std::to_string(measured.makespan / 48.0) + " ms):\n" +
        pp::text_timeline(schedule, measured, measured.makespan / 48.0));
  // The same timeline for chrome://tracing or ui.perfetto.dev (times in ms, one unit = 1000 us).
  const std::string trace = (std::filesystem::path(run_dir_) / "pipeline_trace.json").string();
  const std::string json = pp::chrome_trace(schedule, measured, 1000.0);
  io::write_file_atomic(trace, json.data(), json.size());
  print("pipeline: Chrome trace of that step: " + trace);
  // The same actions for `tessel report` (run_report.h): per pp rank of world rank 0's pipeline,
  // each action's kind (F, B, SendA, RecvA, SendG, RecvG), stage, micro-batch, start and end (ms).
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < timelines.size(); ++r) {
    nlohmann::json actions = nlohmann::json::array();
    for (const pp::TimedAction& t : timelines[r]) {
      const pp::Action& a = schedule.actions[r][size_t(t.index)];
      actions.push_back({{"kind", pp::to_string(a.kind)},
                         {"stage", a.stage},
                         {"microbatch", a.microbatch},
                         {"start", t.start},
                         {"end", t.end}});
    }
    ranks.push_back(std::move(actions));
  }
  const std::string timeline = nlohmann::json{
      {"format", "tessel-pipeline-timeline"},
      {"version", 1},
      {"step", step_},
      {"schedule", config_.parallel.schedule},
      {"stages", schedule.num_stages()},
      {"microbatches", config_.train.grad_accum},
      {"makespan_ms", measured.makespan},
      {"bubble_fraction", measured.bubble_fraction},
      {"ranks", std::move(ranks)}}.dump();
  io::write_file_atomic((std::filesystem::path(run_dir_) / kPipelineTimelineFile).string(),
                        timeline.data(), timeline.size());
}

}  // namespace tessel::train
