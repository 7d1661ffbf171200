// SPDX-License-Identifier: Apache-2.0
// GPT-2 pipeline stages: each stage runs the slice of GPT2::forward_impl (models/gpt2.cpp) its
// layers cover, op for op, so a pipelined step computes what one process computes.
#include "tessel/train/pipeline_stage.h"

#include "tessel/core/error.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/pipeline/generators.h"

namespace tessel::train {

namespace pp = parallel::pipeline;

std::vector<pp::LayerCost> gpt2_layer_costs(const models::GPT2& model) {
  const models::GPT2Config& c = model.config();
  std::vector<pp::LayerCost> costs{{"embedding", 0.0}};
  for (size_t i = 0; i < model.blocks.size(); ++i)
    costs.push_back({"h." + std::to_string(i), double(model.blocks[i]->parameter_count())});
  costs.push_back(
      {"head", double(c.vocab_size * c.n_embd) + double(model.ln_f->parameter_count())});
  return costs;
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

Gpt2Stages::Gpt2Stages(models::GPT2& model, pp::StagePartition partition)
    : model_(model), partition_(std::move(partition)) {
  TESSEL_CHECK(partition_.layers == int64_t(model_.blocks.size()) + 2,
               "Gpt2Stages: a partition of ", partition_.layers, " layers for a GPT-2 of ",
               model_.blocks.size(), " blocks (expected blocks + 2: embedding and head)");
}

int Gpt2Stages::stage_of_parameter(const std::string& name) const {
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  int64_t layer = 0;
  if (starts("wte.") || starts("wpe.")) {
    layer = 0;
  } else if (starts("ln_f.") || starts("lm_head.")) {
    layer = partition_.layers - 1;
  } else if (starts("h.")) {
    const size_t dot = name.find('.', 2);
    layer = 1 + std::stoll(name.substr(2, dot - 2));
  } else {
    TESSEL_FAIL("Gpt2Stages: parameter '", name, "' belongs to no pipeline layer");
  }
  return int(partition_.stage_of(layer));
}

Tensor Gpt2Stages::forward(int stage, int microbatch, const Tensor& input) {
  TESSEL_CHECK(microbatch >= 0 && microbatch < int(batches_.size()), "Gpt2Stages: micro-batch ",
               microbatch, " of a step with ", batches_.size());
  const io::TokenBatch& batch = batches_[size_t(microbatch)];
  const auto [begin, end] = partition_.layers_of(stage);
  const int64_t blocks = int64_t(model_.blocks.size());
  Tensor x = input;
  if (begin == 0) {
    const int64_t t = batch.x.size(1);
    Tensor positions = arange(0, double(t), 1.0, DType::I64);
    x = ops::add(model_.wte->forward(batch.x), model_.wpe->forward(positions));
    x = model_.drop->forward(x);
  }
  for (int64_t l = std::max<int64_t>(begin, 1); l < std::min(end, blocks + 1); ++l) {
    x = model_.blocks[size_t(l - 1)]->forward(x);
  }
  if (end < blocks + 2) return x;
  x = model_.ln_f->forward(x);
  Tensor logits = ops::linear(x, model_.lm_head_weight());
  Tensor loss;
  if (loss_) {
    loss = loss_(logits, batch.y);
  } else {
    const int64_t n = batch.y.numel();
    loss = ops::cross_entropy(ops::reshape(logits, {n, model_.config().vocab_size}),
                              batch.y.reshape({n}));
  }
  return loss_scale_ == 1.0 ? loss : ops::mul(loss, loss_scale_);
}

}  // namespace tessel::train
