// SPDX-License-Identifier: Apache-2.0
// The prefill + cached decode loop behind `tessel generate`.
#include "tessel/models/generation.h"

#include <chrono>

#include "tessel/autograd/grad_mode.h"
#include "tessel/tensor/allocator.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::models {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The logits of the last position of a [1, T, vocab] result, as f32.
Tensor last_row(const Tensor& logits) {
  return logits.narrow(1, logits.size(1) - 1, 1).to(DType::F32);
}

}  // namespace

GenerationResult generate(CausalLM& model, const std::vector<int64_t>& prompt,
                          const GenerationOptions& options) {
  const ModelConfig& config = model.model_config();
  const int64_t max_positions = config.max_positions(), vocab_size = config.vocabulary_size();
  const int64_t n_prompt = int64_t(prompt.size()), n_new = options.max_new_tokens;
  TESSEL_CHECK(n_prompt >= 1, "generate: empty prompt (at least one token is needed)");
  TESSEL_CHECK(n_new >= 0, "generate: max_new_tokens ", n_new, " must be >= 0");
  TESSEL_CHECK(n_prompt + n_new <= max_positions, "generate: prompt of ", n_prompt, " tokens + ",
               n_new, " new tokens = ", n_prompt + n_new,
               " exceeds the context length max_positions = ", max_positions);
  for (int64_t i = 0; i < n_prompt; ++i) {
    TESSEL_CHECK(prompt[size_t(i)] >= 0 && prompt[size_t(i)] < vocab_size,
                 "generate: prompt token ", i, " has id ", prompt[size_t(i)], " outside [0, ",
                 vocab_size, ")");
  }
  TESSEL_CHECK(options.vocab_limit >= 0 && options.vocab_limit <= vocab_size,
               "generate: vocab_limit ", options.vocab_limit,
               " outside [0, vocab_size = ", vocab_size, "]");
  Sampler sampler(options.sampling);
  GenerationResult result;
  if (n_new == 0) return result;
  autograd::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  // The generation's own peak above what the loaded model holds (the trainer's step peak does
  // the same), read once it ends.
  Allocator& host = cpu_allocator();
  result.allocator_base_bytes = int64_t(host.bytes_in_use());
  host.reset_peak();
  KVCache cache = model.make_cache(1, n_prompt + n_new);
  result.kv_cache_bytes = int64_t(cache.nbytes());
  try {
    auto start = Clock::now();
    // Tensor parallelism: forward_step yields this rank's vocabulary columns; the hook gathers.
    // The model's device takes the ids; the sampler reads the logits on the host.
    const Device device = model.device();
    auto step = [&](Tensor out) {
      return last_row(
          to_device(options.full_logits ? options.full_logits(out) : out, Device::cpu()));
    };
    Tensor logits = step(model.forward_step(
        to_device(from_data(prompt, Shape{1, n_prompt}), device), cache, /*last_only=*/true));
    result.prefill_seconds = since(start);
    start = Clock::now();
    const int64_t vocab = options.vocab_limit > 0 ? options.vocab_limit : vocab_size;
    for (int64_t s = 0; s < n_new; ++s) {
      const int64_t next = sampler.sample({logits.data<float>(), size_t(vocab)});
      result.tokens.push_back(next);
      result.token_logits.push_back(logits.data<float>()[next]);
      const bool keep_going = !options.on_token || options.on_token(next);
      if (!keep_going || (options.stop_token && next == *options.stop_token)) {
        result.stopped = true;
        break;
      }
      if (s + 1 == n_new) break;
      logits = step(model.forward_step(
          to_device(from_data(std::vector<int64_t>{next}, Shape{1, 1}), device), cache));
      ++result.decode_forwards;
    }
    result.decode_seconds = since(start);
    result.allocator_peak_bytes = int64_t(host.peak_bytes()) - result.allocator_base_bytes;
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return result;
}

}  // namespace tessel::models
