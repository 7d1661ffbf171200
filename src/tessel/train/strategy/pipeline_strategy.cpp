// SPDX-License-Identifier: Apache-2.0
// The pipeline axis (pipeline_strategy.h): building the stages and the schedule, running a step's
// micro-batches through it, the tied embedding's exchange, and the measured timeline.
//
// bf16/fp16: one scope of 16-bit copies over this rank's stages spans the whole schedule (1F1B runs
// a micro-batch's backward after later forwards; the copies serve every micro-batch's graph) and
// closes before the tied-gradient exchange reads the f32 weight; messages travel in the compute
// dtype; under fp16 the last stage returns loss * scale and the losses are divided back.
//
// Checkpoints stay layout-independent: each stage writes the pieces of the parameters it trains,
// and a resumed rank reads its part of whatever pp wrote the checkpoint.
#include "tessel/train/strategy/pipeline_strategy.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tessel/autograd/meta.h"
#include "tessel/io/mapped_file.h"
#include "tessel/nn/moe.h"
#include "tessel/parallel/pipeline/printer.h"
#include "tessel/parallel/pipeline/simulator.h"
#include "tessel/parallel/tensor/vocab_parallel.h"
#include "tessel/sharding/placement.h"
#include "tessel/train/metrics/run_report.h"

namespace tessel::train {

namespace pp = parallel::pipeline;

namespace {

// Tags above every tag the executor uses (it takes 2 * stages * micro-batches from 0).
constexpr int kTiedGradientTag = dist::Communicator::kMaxTag;
constexpr int kTiedWeightTag = dist::Communicator::kMaxTag - 1;

}  // namespace

PipelineStrategy::PipelineStrategy(models::CausalLM& model, const TrainLayout& layout,
                                   PipelineSetup setup)
    : model_(model), layout_(layout), setup_(std::move(setup)) {
  const int p = layout_.pp_size();
  pp::Schedule schedule = schedule_from_spec(setup_.schedule, p, int(setup_.micro_batches));
  const std::vector<pp::LayerCost> costs = pipeline_layer_costs(model_);
  TESSEL_CHECK(int64_t(costs.size()) >= schedule.num_stages(),
               "train: parallel.schedule = ", setup_.schedule, " at pp = ", p, " needs ",
               schedule.num_stages(), " stages, but the model's ", model_.num_layers(),
               " blocks has only ", costs.size(), " pipeline layers (embedding, blocks, head)");
  stages_ = std::make_unique<ModelStages>(
      model_, pipeline_partition(costs, schedule.num_stages(), setup_.split));
  if (setup_.begin_micro_batch)
    stages_->set_before_forward([f = setup_.begin_micro_batch](int m) { f(m); });
  for (const auto& [name, param] : model_.named_parameters())
    owner_[name] = schedule.owner(stages_->stage_of_parameter(name));
  blocks_per_rank_.assign(size_t(p), 0);
  for (int64_t s = 0; s < stages_->partition().num_stages(); ++s) {
    const auto [begin, end] = stages_->partition().layers_of(s);
    // Pipeline layers 1..L are the blocks; 0 the embedding, L + 1 the head.
    const int64_t first = std::max<int64_t>(begin, 1),
                  stop = std::min(end, model_.num_layers() + 1);
    blocks_per_rank_[size_t(schedule.owner(int(s)))] += stop - first;
    if (schedule.owner(int(s)) == layout_.pp_rank())
      for (int64_t l = first; l < stop; ++l) rank_blocks_.push_back(l - 1);
  }
  tied_ = model_.head_tied_parameters();
  {
    // The modules that hold this rank's parameters (and the tied ones its head multiplies with),
    // as roots of the 16-bit copies. A parameter inside an MoE layer is covered by the layer
    // itself, never by its router alone: a LowPrecisionScope rooted at the layer keeps the router
    // f32 (moe.cpp), one rooted at the router's Linear would cast it, and routing would then
    // differ from one process's.
    std::map<std::string, nn::MoE*> moe_layers;
    for (auto& [path, module] : model_.named_modules())
      if (auto* moe = dynamic_cast<nn::MoE*>(module)) moe_layers[path + "."] = moe;
    std::set<nn::Module*> seen;
    const bool holds_head =
        schedule.owner(stages_->partition().num_stages() - 1) == layout_.pp_rank();
    for (const auto& [name, param] : model_.named_parameters()) {
      const bool head_uses =
          holds_head && std::find(tied_.begin(), tied_.end(), name) != tied_.end();
      if (owner_.at(name) != layout_.pp_rank() && !head_uses) continue;
      nn::Module* m = owner_module(model_, name);
      for (const auto& [prefix, moe] : moe_layers)
        if (name.compare(0, prefix.size(), prefix) == 0) m = moe;
      if (seen.insert(m).second) modules_.push_back(m);
    }
  }
  // Tensor parallelism inside the stages: the last stage's vocab-parallel loss, and under
  // sequence parallelism messages that carry this rank's sequence piece (the p2p peer is the same
  // tp coordinate of the adjacent stage, which the mesh's pp communicator connects).
  int64_t message_seq = setup_.seq_len;
  if (setup_.tp) {
    ModelTensorParallel& tp = setup_.tp->model_tp();
    stages_->set_loss([&tp](const Tensor& logits, const Tensor& targets) {
      return parallel::vocab_parallel_cross_entropy(logits, targets, *tp.tp, tp.vocab,
                                                    tp.vocab_offset);
    });
    if (tp.sequence_parallel)
      message_seq = sharding::shard_size(setup_.seq_len, tp.tp->size(), tp.tp->rank());
    // Later stages never run the embedding that records the full sequence length, which the
    // gathers of their sequence pieces need.
    if (tp.result.sequence) tp.result.sequence->length = setup_.seq_len;
  }
  pp::ExecutorOptions options;
  options.activation_shapes = {
      Shape{setup_.micro_batch, message_seq, model_.model_config().hidden_size()}};
  options.dtype = setup_.dtype;  // bf16/fp16: the stages' activations cross in 16 bits
  std::vector<std::pair<int64_t, int64_t>> stage_layers;
  for (int64_t s = 0; s < stages_->partition().num_stages(); ++s)
    stage_layers.push_back(stages_->partition().layers_of(s));
  const std::string layers = pipeline_stages_line(stage_layers, int64_t(costs.size()) - 2);
  executor_ =
      std::make_unique<pp::PipelineExecutor>(std::move(schedule), layout_.pp, std::move(options));
  if (setup_.print)
    setup_.print("pipeline: " + setup_.schedule + " over pp = " + std::to_string(p) + ", " +
                 std::to_string(setup_.micro_batches) + " micro-batches per step; stages " +
                 layers);
}

PipelineStrategy::~PipelineStrategy() = default;

std::string PipelineStrategy::name() const {
  return "pipeline parallel (pp " + std::to_string(layout_.pp_size()) + ", " + setup_.schedule +
         ")";
}

nn::NamedTensors PipelineStrategy::trainable_parameters() const {
  nn::NamedTensors all = model_.named_parameters();
  std::erase_if(all, [&](const auto& np) { return owner_.at(np.first) != layout_.pp_rank(); });
  return all;
}

void PipelineStrategy::describe_norm(GradNormPlan& plan) const {
  plan.axes.push_back({layout_.pp.get(), {}});  // disjoint stages: the squares add over pp
}

double PipelineStrategy::forward_backward(
    std::vector<io::TokenBatch> batches, double loss_scale,
    const std::function<std::vector<std::shared_ptr<void>>()>& scope) {
  stages_->set_batches(std::move(batches));
  // fp16: the last stage's backward starts from loss * scale (a power of two, so the losses it
  // reports divide back exactly).
  stages_->set_loss_scale(loss_scale);
  pp::ExecutionResult result;
  {
    // One set of 16-bit copies for the step: a micro-batch's backward may come after later
    // micro-batches' forwards.
    const auto held = scope();
    result = executor_->run(*stages_);
  }
  const int p = layout_.pp_size(), rank = layout_.pp_rank();
  for (const std::string& name : tied_) {
    const Tensor w = model_.find(name);
    if (rank == p - 1) {
      const Tensor g = w.grad().defined() ? w.grad() : zeros_like(w);
      layout_.pp->send(g, 0, kTiedGradientTag);
    } else if (rank == 0) {
      Tensor head = empty_like(w);
      layout_.pp->recv(head, p - 1, kTiedGradientTag);
      if (add_gradient_) {
        add_gradient_(name, head);
        continue;
      }
      Tensor g = w.grad();
      const auto held = hold_ ? hold_(g, /*write=*/true) : nullptr;
      autograd::add_gradients_into(g, head);
    }
  }
  double loss_sum = 0;  // in micro-batch order, as one process adds them
  for (double loss : result.losses) loss_sum += loss / loss_scale;
  last_ = std::move(result);
  Tensor t = full({1}, loss_sum, DType::F64);
  layout_.pp->all_reduce(t, dist::ReduceOp::Sum);
  return t.data<double>()[0];
}

void PipelineStrategy::after_update() {
  if (tied_.empty()) return;
  const int p = layout_.pp_size(), rank = layout_.pp_rank();
  // ZeRO-3 keeps a shard of the first stage's embedding: whole while it is sent.
  const auto gathered =
      rank == 0 && !zero3_.empty() ? zero3_gather_unit(zero3_.front(), tied_.front()) : nullptr;
  for (const std::string& name : tied_) {
    Tensor w = model_.find(name);
    const auto held = rank == 0 && hold_ ? hold_(w, /*write=*/false) : nullptr;
    if (rank == 0) layout_.pp->send(w, p - 1, kTiedWeightTag);
    if (rank == p - 1) layout_.pp->recv(w, 0, kTiedWeightTag);
  }
}

void PipelineStrategy::sync_model() {
  std::vector<std::shared_ptr<void>> gathered;  // ZeRO-3: whole parameters while sent
  for (parallel::Zero3Parameters* z : zero3_) gathered.push_back(zero3_gather_all(z));
  for (auto& [name, param] : model_.named_parameters()) {
    // Offloaded, this stage's own parameters are read where their chunks are.
    const bool own = owner_.at(name) == layout_.pp_rank();
    const auto held = own && hold_ ? hold_(param, /*write=*/false) : nullptr;
    // Another stage's parameter is shape-only here until the first time it is brought.
    if (!held) param.storage().materialize();
    layout_.pp->broadcast(param, owner_.at(name));
  }
}

// The measured timeline of the last step next to the simulator's prediction for the same
// schedule with the measured mean forward and backward times. Collective over pp.
void PipelineStrategy::report(const std::string& run_dir, int64_t step) {
  if (!last_) return;
  const pp::Schedule& schedule = executor_->schedule();
  const auto timelines = pp::gather_timelines(*layout_.pp, schedule, last_->timeline);
  if (layout_.world_rank() != 0) return;
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
  setup_.print(text);
  setup_.print("measured timeline (one cell = " + std::to_string(measured.makespan / 48.0) +
               " ms):\n" + pp::text_timeline(schedule, measured, measured.makespan / 48.0));
  // The same timeline for chrome://tracing or ui.perfetto.dev (times in ms, one unit = 1000 us).
  const std::string trace = (std::filesystem::path(run_dir) / "pipeline_trace.json").string();
  const std::string json = pp::chrome_trace(schedule, measured, 1000.0);
  io::write_file_atomic(trace, json.data(), json.size());
  setup_.print("pipeline: Chrome trace of that step: " + trace);
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
      {"step", step},
      {"schedule", setup_.schedule},
      {"stages", schedule.num_stages()},
      {"microbatches", setup_.micro_batches},
      {"makespan_ms", measured.makespan},
      {"bubble_fraction", measured.bubble_fraction},
      {"ranks", std::move(ranks)}}.dump();
  io::write_file_atomic((std::filesystem::path(run_dir) / kPipelineTimelineFile).string(),
                        timeline.data(), timeline.size());
}

}  // namespace tessel::train
