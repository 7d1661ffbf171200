// SPDX-License-Identifier: Apache-2.0
// Pipeline stages of a causal LM: each stage runs the slice of CausalLM::forward its layers cover
// (embed, blocks, head), op for op, so a pipelined step computes what one process computes.
#include "tessel/train/pipeline_stage.h"

#include <algorithm>
#include <sstream>

#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/pipeline/generators.h"

namespace tessel::train {

namespace pp = parallel::pipeline;

namespace {

std::string layer_name(int64_t layer, int64_t blocks) {
  if (layer == 0) return "embedding";
  return layer > blocks ? "head" : "block." + std::to_string(layer - 1);
}

}  // namespace

std::vector<pp::LayerCost> pipeline_layer_costs(const models::CausalLM& model) {
  const std::vector<double> cost = model.layer_costs();
  const int64_t blocks = model.num_layers();
  TESSEL_CHECK(int64_t(cost.size()) == blocks + 2, "pipeline: ", model.type_name(), " costs ",
               cost.size(), " layers, expected its ", blocks, " blocks + 2");
  std::vector<pp::LayerCost> costs;
  for (int64_t layer = 0; layer < blocks + 2; ++layer)
    costs.push_back({layer_name(layer, blocks), cost[size_t(layer)]});
  return costs;
}

std::string pipeline_stages_line(const std::vector<std::pair<int64_t, int64_t>>& stage_layers,
                                 int64_t blocks) {
  std::string line;  // a stage may hold no block at all
  for (size_t s = 0; s < stage_layers.size(); ++s) {
    const auto [begin, end] = stage_layers[s];
    line += (s > 0 ? " | " : "") + layer_name(begin, blocks);
    if (end - begin > 1) line += ".." + layer_name(end - 1, blocks);
  }
  return line;
}

pp::StagePartition pipeline_partition(const std::vector<pp::LayerCost>& costs, int64_t stages,
                                      const std::string& split) {
  if (split.empty()) return pp::balance(costs, stages);
  const int64_t layers = int64_t(costs.size()), blocks = layers - 2;
  std::vector<int64_t> counts;
  std::stringstream in(split);
  for (std::string token; std::getline(in, token, ',');) {
    const size_t b = token.find_first_not_of(' '), e = token.find_last_not_of(' ');
    const std::string t = b == std::string::npos ? "" : token.substr(b, e - b + 1);
    TESSEL_CHECK(!t.empty() && t.size() <= 9 &&
                     std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }),
                 "parallel.pipeline_split = '", split, "': '", token,
                 "' is not a block count; expected counts per stage like 3,4,4,2");
    counts.push_back(std::stoll(t));
  }
  TESSEL_CHECK(split.back() != ',', "parallel.pipeline_split = '", split,
               "' ends with a comma; expected counts per stage like 3,4,4,2");
  TESSEL_CHECK(int64_t(counts.size()) == stages, "parallel.pipeline_split = '", split, "' gives ",
               counts.size(), " stages; the schedule has ", stages,
               " (pp, times V for interleaved:V)");
  int64_t total = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    // The first stage holds the embedding and the last the head, so they may hold no block.
    TESSEL_CHECK(counts[s] > 0 || s == 0 || s + 1 == counts.size(), "parallel.pipeline_split = '",
                 split, "': stage ", s,
                 " has no block; only the first and last stages (the embedding's, the head's) "
                 "may");
    total += counts[s];
  }
  TESSEL_CHECK(total == blocks, "parallel.pipeline_split = '", split, "': the counts sum to ",
               total, " but the model has ", blocks, " blocks");
  pp::StagePartition p;
  p.layers = layers;
  p.first.push_back(0);
  int64_t next = 1;  // the embedding is layer 0
  for (size_t s = 0; s + 1 < counts.size(); ++s) {
    next += counts[s];
    p.first.push_back(next);
  }
  TESSEL_CHECK(stages == 1 || (p.first[1] > 0 && p.first.back() < layers),
               "parallel.pipeline_split = '", split,
               "': a stage with neither a block nor the embedding or head");
  return p;
}

std::string pipeline_split_of(const pp::StagePartition& partition) {
  const int64_t last = partition.num_stages() - 1;
  std::string spec;
  for (int64_t s = 0; s <= last; ++s) {
    const auto [begin, end] = partition.layers_of(s);
    const int64_t blocks = end - begin - (s == 0 ? 1 : 0) - (s == last ? 1 : 0);
    TESSEL_CHECK(blocks >= 0, "pipeline_split_of: stage ", s, " of ", last + 1,
                 " holds no layer of its own");
    spec += (s ? "," : "") + std::to_string(blocks);
  }
  return spec;
}

nn::Module* owner_module(nn::Module& root, const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string path = dot == std::string::npos ? std::string() : name.substr(0, dot);
  for (auto& [p, module] : root.named_modules())
    if (p == path) return module;
  TESSEL_FAIL("no module of ", root.type_name(), " holds parameter '", name, "'");
}

pp::Schedule schedule_from_spec(const std::string& spec, int ranks, int microbatches) {
  std::string name = spec;
  int v = 2;
  if (const auto colon = spec.find(':'); colon != std::string::npos) {
    name = spec.substr(0, colon);
    const std::string count = spec.substr(colon + 1);
    TESSEL_CHECK(name == "interleaved" && !count.empty() &&
                     count.find_first_not_of("0123456789") == std::string::npos && count.size() < 4,
                 "parallel.schedule = '", spec,
                 "': expected gpipe, 1f1b, interleaved or interleaved:V (V >= 2)");
    v = std::stoi(count);
    TESSEL_CHECK(v >= 2, "parallel.schedule = '", spec, "': V = ", v, " must be >= 2");
  }
  TESSEL_CHECK(name == "gpipe" || name == "1f1b" || name == "interleaved", "parallel.schedule = '",
               spec, "': expected gpipe, 1f1b, interleaved or interleaved:V (V >= 2)");
  TESSEL_CHECK(name != "interleaved" || microbatches % ranks == 0, "parallel.schedule = '", spec,
               "' moves micro-batches in groups of pp = ", ranks,
               ": train.grad_accum (--microbatches) = ", microbatches, " must be a multiple of it");
  return pp::make_schedule(name, ranks, microbatches, v);
}

ModelStages::ModelStages(models::CausalLM& model, pp::StagePartition partition)
    : model_(model), partition_(std::move(partition)) {
  TESSEL_CHECK(partition_.layers == model_.num_layers() + 2, "ModelStages: a partition of ",
               partition_.layers, " layers for a model of ", model_.num_layers(),
               " blocks (expected blocks + 2: embedding and head)");
}

int ModelStages::stage_of_parameter(const std::string& name) const {
  return int(partition_.stage_of(model_.layer_of_parameter(name)));
}

namespace {

// y = x; backward passes dy to x and `scale` (the gradient the last stage's loss starts from) to
// the scalar `aux`, in aux's own dtype (f32 routers under 16-bit activations).
class AuxiliaryLossBackward final : public autograd::Node {
 public:
  AuxiliaryLossBackward(Shape aux_shape, DType aux_dtype, double scale)
      : shape_(std::move(aux_shape)), dtype_(aux_dtype), scale_(scale) {}
  std::string_view name() const override { return "auxiliary_loss_backward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {grads[0], full(shape_, scale_, dtype_)};
  }

 private:
  Shape shape_;
  DType dtype_;
  double scale_;
};

Tensor with_auxiliary_loss(const Tensor& x, const Tensor& aux, double scale) {
  if (!autograd::needs_grad({x, aux})) return x;
  Tensor y = x.detach();
  autograd::record(std::make_shared<AuxiliaryLossBackward>(aux.shape(), aux.dtype(), scale),
                   {x, aux}, {y});
  return y;
}

}  // namespace

Tensor ModelStages::forward(int stage, int microbatch, const Tensor& input) {
  TESSEL_CHECK(microbatch >= 0 && microbatch < int(batches_.size()), "ModelStages: micro-batch ",
               microbatch, " of a step with ", batches_.size());
  const io::TokenBatch& batch = batches_[size_t(microbatch)];
  if (before_forward_) before_forward_(microbatch);
  const auto [begin, end] = partition_.layers_of(stage);
  const int64_t blocks = model_.num_layers();
  Tensor x = begin == 0 ? model_.embed(batch.x) : input;
  Tensor aux;  // this stage's blocks' auxiliary losses
  for (int64_t l = std::max<int64_t>(begin, 1); l < std::min(end, blocks + 1); ++l) {
    x = model_.block(l - 1, x);
    if (const Tensor a = model_.block_auxiliary_loss(l - 1); a.defined())
      aux = aux.defined() ? ops::add(aux, a) : a;
  }
  if (aux.defined()) {
    ExpertLoad load;
    load.aux = aux.item();
    for (models::ExpertLayerStats& s : model_.expert_stats())
      if (s.layer >= begin - 1 && s.layer < end - 1) load.layers.push_back(std::move(s));
    expert_loads_.push_back(std::move(load));
  }
  if (end < blocks + 2) return aux.defined() ? with_auxiliary_loss(x, aux, loss_scale_) : x;
  Tensor logits = model_.head(x);
  Tensor loss;
  if (loss_) {
    loss = loss_(logits, batch.y);
  } else {
    const int64_t n = batch.y.numel();
    loss = ops::cross_entropy(ops::reshape(logits, {n, logits.size(2)}), batch.y.reshape({n}));
  }
  if (loss_scale_ != 1.0) loss = ops::mul(loss, loss_scale_);
  return aux.defined() ? with_auxiliary_loss(loss, aux, loss_scale_) : loss;
}

}  // namespace tessel::train
