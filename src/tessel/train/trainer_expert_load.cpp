// SPDX-License-Identifier: Apache-2.0
// A mixture-of-experts model's step record: per MoE layer the tokens each expert computed, the
// dropped pairs and the auxiliary losses, summed over the step's micro-batches, then over the
// pipeline stages (each layer runs on one) and over dp, so the record describes the whole batch
// whatever the layout.
#include <map>

#include "tessel/train/trainer.h"

namespace tessel::train {

namespace {

// Every layer as packed numbers: tokens, dropped, capacity, balance, z and aux losses, then the
// tokens per expert. The record's layers and their expert counts are the same on every rank.
std::vector<double> pack(const std::vector<ExpertLoadRecord>& layers) {
  std::vector<double> out;
  for (const ExpertLoadRecord& e : layers) {
    out.insert(out.end(), {double(e.tokens), double(e.dropped), double(e.capacity), e.balance_loss,
                           e.z_loss, e.aux_loss});
    for (int64_t n : e.tokens_per_expert) out.push_back(double(n));
  }
  return out;
}

// `scale` divides the losses (a mean over dp); the counts stay sums.
void unpack(const std::vector<double>& sum, double scale, bool with_capacity,
            std::vector<ExpertLoadRecord>& layers) {
  size_t i = 0;
  for (ExpertLoadRecord& e : layers) {
    e.tokens = int64_t(sum[i++]);
    e.dropped = int64_t(sum[i++]);
    if (with_capacity) e.capacity = int64_t(sum[i]);
    ++i;
    e.balance_loss = sum[i++] / scale;
    e.z_loss = sum[i++] / scale;
    e.aux_loss = sum[i++] / scale;
    for (int64_t& n : e.tokens_per_expert) n = int64_t(sum[i++]);
  }
}

}  // namespace

void Trainer::add_expert_load(StepRecord& r, double aux, int64_t micro_batches,
                              const std::vector<models::ExpertLayerStats>& layers) const {
  const double share = 1.0 / double(micro_batches);
  r.has_experts = true;
  r.aux_loss += aux * share;
  if (r.experts.empty()) {
    // Every MoE layer of the model, in block order, whether or not this rank runs it.
    for (const models::ExpertLayerStats& s : model_->expert_stats()) {
      ExpertLoadRecord e;
      e.layer = s.layer;
      r.experts.push_back(std::move(e));
    }
    size_t i = 0;
    for (auto& [name, module] : model_->named_modules())
      if (auto* moe = dynamic_cast<nn::MoE*>(module); moe && i < r.experts.size())
        r.experts[i++].tokens_per_expert.assign(size_t(moe->config().num_experts), 0);
  }
  std::map<int64_t, ExpertLoadRecord*> by_layer;
  for (ExpertLoadRecord& e : r.experts) by_layer[e.layer] = &e;
  for (const models::ExpertLayerStats& layer : layers) {
    const nn::MoEStats& s = layer.stats;
    ExpertLoadRecord& e = *by_layer.at(layer.layer);
    e.tokens += s.tokens;
    e.capacity = s.capacity;
    e.dropped += s.dropped;
    e.tokens_per_expert.resize(std::max(e.tokens_per_expert.size(), s.tokens_per_expert.size()), 0);
    for (size_t x = 0; x < s.tokens_per_expert.size(); ++x)
      e.tokens_per_expert[x] += s.tokens_per_expert[x];
    e.balance_loss += s.balance_loss * share;
    e.z_loss += s.z_loss * share;
    e.aux_loss += s.aux_loss * share;
  }
}

void Trainer::add_stage_expert_loads(StepRecord& r) const {
  const int64_t accum = config_.train.grad_accum;
  add_expert_load(r, 0.0, accum, {});  // every layer present, even on a stage without MoE layers
  for (const ModelStages::ExpertLoad& load : pipeline_->expert_loads())
    add_expert_load(r, load.aux, accum, load.layers);
  // Each layer ran on one stage: the sums over pp are its figures, and the auxiliary losses add.
  std::vector<double> packed = pack(r.experts);
  packed.push_back(r.aux_loss);
  Tensor t = from_data(packed, Shape{int64_t(packed.size())});
  layout_.pp->all_reduce(t);
  const std::vector<double> sum = t.to_vector<double>();
  unpack(sum, 1.0, /*with_capacity=*/true, r.experts);
  r.aux_loss = sum.back();
}

void Trainer::reduce_expert_load(StepRecord& r) const {
  if (!dp_) return;
  const std::vector<double> packed = pack(r.experts);
  Tensor t = from_data(packed, Shape{int64_t(packed.size())});
  dp_->all_reduce(t);
  unpack(t.to_vector<double>(), double(dp_size()), /*with_capacity=*/false, r.experts);
}

}  // namespace tessel::train
