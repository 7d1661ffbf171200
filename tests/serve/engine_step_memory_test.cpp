// SPDX-License-Identifier: Apache-2.0
// The serving engine's step memory against its trace (serve/step_memory.h): the host allocator's
// peak during the engine's largest step, above the loaded model and the paged KV pool, equals the
// meta device's count of the same step (the engine's PagedStep and the model's forward), for a
// GPT-2 and a LLaMA at odd sizes.
#include <gtest/gtest.h>

#include "common/tokenizer_test_util.h"
#include "serve/engine_test_util.h"
#include "tessel/core/rng.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/serve/engine.h"
#include "tessel/serve/step_memory.h"

namespace tessel::serve {
namespace {

using engine_testing::Collector;
using engine_testing::prompt_of;

Request request(const std::string& id, std::vector<int64_t> prompt) {
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.params.max_tokens = 5;
  r.params.temperature = 0.0;
  r.params.ignore_eos = true;
  return r;
}

// Three prompts of 7 tokens queued before the engine starts, 21 tokens a step: the first step
// packs all three prompts whole (each sequence sampled, 7 keys), the largest step of the run (the
// decode steps that follow carry three tokens).
TEST(EngineStepMemory, TheLargestStepEqualsItsTrace) {
  Generator g1(11), g2(12);
  const std::vector<std::shared_ptr<models::CausalLM>> models = {
      models::GPT2::random(engine_testing::tiny_gpt2_config(), g1),
      models::Llama::random(engine_testing::tiny_llama_config(), g2)};
  for (const auto& model : models) {
    EngineOptions options;
    options.max_batch_tokens = 21;
    options.max_seqs = 3;
    options.block_size = 4;
    const int64_t predicted = trace_step_memory(model->model_config(), options, 21, 3, 7);
    Engine engine(model, io::Tokenizer(io::small_config()), options);
    Collector c;
    for (int i = 0; i < 3; ++i) {
      const std::string id = std::to_string(i);
      ASSERT_EQ(engine.submit(request(id, prompt_of(7, 20 + uint64_t(i))), c.sink(id)).status,
                SubmitStatus::kAccepted);
    }
    engine.start();
    for (int i = 0; i < 3; ++i) c.wait(std::to_string(i));
    const EngineStats st = engine.stats();
    std::printf("%s: largest engine step %lld bytes above the model and the pool, traced %lld\n",
                model->type_name().c_str(), (long long)st.step_peak_bytes, (long long)predicted);
    EXPECT_GT(predicted, 0);
    EXPECT_EQ(st.step_peak_bytes, predicted) << model->type_name();
  }
}

}  // namespace
}  // namespace tessel::serve
