// SPDX-License-Identifier: Apache-2.0
// What the trainer does besides stepping: the validation loss over fixed windows, and the sample
// generated at the end of a run.
#include <algorithm>
#include <chrono>
#include <optional>

#include "tessel/autograd/grad_mode.h"
#include "tessel/models/generation.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

EvalRecord Trainer::evaluate() {
  EvalRecord r;
  r.step = step_;
  if (!val_data_) return r;
  // ZeRO-3 with pp: the stages' units gather around their own modules, not the whole model's
  // forward (the tied head would find wte released), so evaluation holds everything gathered.
  const auto gathered = pipeline_ ? gather_all_zero3() : nullptr;
  if (pipeline_) pipeline_->sync_model();  // every rank evaluates the whole current model
  // Offloaded: the units hold their chunks around their own modules' forwards, but the head
  // multiplies with the first stage's tied embedding again at the end: held throughout.
  std::vector<std::shared_ptr<void>> tied_held;
  if (pipeline_ && offload_)
    for (const std::string& name : pipeline_->tied())
      if (const Tensor w = model_->find(name); offload_->in_chunks(w))
        tied_held.push_back(offload_->hold_for_compute(w));
  const auto t0 = std::chrono::steady_clock::now();
  autograd::NoGradGuard no_grad;
  model_->eval();
  io::LoaderOptions lo;
  lo.seq_len = config_.train.seq_len;
  lo.shuffle = false;  // the same windows at every evaluation, so the values compare
  lo.batch = 1;
  const int64_t windows = io::TokenLoader(val_data_, lo).windows_per_epoch();
  if (windows == 0) {
    model_->train();
    return r;
  }
  // The dp ranks split each global micro-batch as in training, so every layout with the same
  // global batch evaluates the same windows (and reports the same mean); a split too small to
  // share is evaluated whole by every rank.
  const int64_t world = windows >= dp_size() ? dp_size() : 1;
  lo.rank = world > 1 ? dp_->rank() : 0;
  lo.world = world;
  lo.batch = std::max<int64_t>(1, std::min(config_.train.micro_batch, windows / world));
  io::TokenLoader loader(val_data_, lo);
  const int64_t batches =
      std::max<int64_t>(1, std::min(config_.eval.batches, windows / (lo.batch * world)));
  double total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const io::TokenBatch batch = loader.next();
    total += host_scalar(compute_eval_loss(batch.x, batch.y));
  }
  model_->train();
  r.val_loss = world > 1 ? dp_mean(total / double(batches)) : total / double(batches);
  r.tokens = batches * lo.batch * world * lo.seq_len;
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  last_val_loss_ = r.val_loss;
  return r;
}

std::string Trainer::generate_sample() {
  const SampleSection& s = config_.sample;
  std::vector<int64_t> prompt;
  if (!s.prompt.empty() && tokenizer_) {
    for (int32_t id : tokenizer_->encode(s.prompt)) prompt.push_back(id);
  }
  if (prompt.empty()) prompt.push_back(eot_id_ >= 0 ? eot_id_ : 0);
  const int64_t room = model_->model_config().max_positions() - int64_t(prompt.size());
  if (room <= 0) return "";
  models::GenerationOptions g;
  g.max_new_tokens = std::min(s.tokens, room);
  g.sampling.temperature = s.temperature;
  g.sampling.top_k = s.top_k;
  g.sampling.seed = s.seed;
  if (tokenizer_)
    g.vocab_limit = std::min(model_->model_config().vocabulary_size(), tokenizer_->vocab_size());
  std::optional<SequenceParallelPause> pause;  // decoding runs without sequence pieces
  if (const ModelTensorParallel* tp_model = tp()) {
    g.full_logits = [tp_model](const Tensor& local) {
      return model_tp_full_logits(*tp_model, local);
    };
    pause.emplace(*tp_model);
  }
  autograd::NoGradGuard no_grad;
  model_->eval();
  const models::GenerationResult out = models::generate(*model_, prompt, g);
  model_->train();
  if (!tokenizer_) {
    std::string ids;
    for (int64_t id : out.tokens) ids += (ids.empty() ? "" : " ") + std::to_string(id);
    return ids;
  }
  std::vector<int32_t> all;
  if (!s.prompt.empty()) {
    for (int64_t id : prompt) all.push_back(int32_t(id));
  }
  for (int64_t id : out.tokens) all.push_back(int32_t(id));
  return tokenizer_->decode(all);
}

}  // namespace tessel::train
