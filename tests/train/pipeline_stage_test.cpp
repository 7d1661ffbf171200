// SPDX-License-Identifier: Apache-2.0
// GPT-2 cut into pipeline stages: running the stages one after another computes GPT2::loss
// bitwise (each stage is a slice of the same forward), parameters belong to the stage of their
// layer, and the schedule names of --schedule parse or fail with the allowed forms.
#include "tessel/train/pipeline_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tessel/autograd/engine.h"
#include "tessel/core/error.h"
#include "tessel/dist/meta/meta_communicator.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/tensor/default_device.h"
#include "tessel/train/model_presets.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::train {
namespace {

namespace pp = parallel::pipeline;

models::GPT2Config config_of(int64_t layers) {
  models::GPT2Config c;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_embd = 16;
  c.n_layer = layers;
  c.n_head = 2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

io::TokenBatch batch_of(int64_t rows, int64_t t) {
  std::vector<int64_t> x(size_t(rows * t)), y(size_t(rows * t));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = int64_t((i * 7 + 3) % 37);
    y[i] = int64_t((i * 11 + 5) % 37);
  }
  return {from_data(x, {rows, t}), from_data(y, {rows, t})};
}

TEST(ModelStages, StagesInSequenceComputeTheModelsLossAndGradients) {
  for (int64_t stages : {2, 5}) {
    SCOPED_TRACE("stages " + std::to_string(stages));
    Generator g1(3), g2(3);
    auto whole = models::GPT2::random(config_of(3), g1);
    auto cut = models::GPT2::random(config_of(3), g2);
    const io::TokenBatch batch = batch_of(3, 13);
    const Tensor want = whole->loss(batch.x, batch.y);
    autograd::backward(want);

    const auto costs = pipeline_layer_costs(*cut);
    ASSERT_EQ(costs.size(), 5u);  // embedding, h.0, h.1, h.2, head
    EXPECT_EQ(costs.front().cost, 0.0);
    ModelStages runner(*cut, pp::balance(costs, stages));
    runner.set_batches({batch});
    // What the executor does on each stage: a received activation is a fresh leaf, and backward
    // runs stage by stage from the loss, handing each input gradient upstream.
    std::vector<Tensor> inputs(static_cast<size_t>(stages));
    std::vector<Tensor> outputs(static_cast<size_t>(stages));
    for (int s = 0; s < stages; ++s) {
      if (s > 0) inputs[size_t(s)] = outputs[size_t(s - 1)].detach().set_requires_grad(true);
      outputs[size_t(s)] = runner.forward(s, 0, inputs[size_t(s)]);
      if (s + 1 < stages) {
        EXPECT_EQ(outputs[size_t(s)].shape(), (Shape{3, 13, 16}));
      }
    }
    EXPECT_EQ(outputs.back().item(), want.item());  // bitwise: the same ops in the same order
    autograd::backward(outputs.back());
    for (int s = stages - 2; s >= 0; --s)
      autograd::backward({outputs[size_t(s)]}, {inputs[size_t(s + 1)].grad()});
    const auto a = whole->named_parameters();
    const auto b = cut->named_parameters();
    int64_t checked = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(b[i].second.grad().defined()) << b[i].first;
      // wte sums its head and embedding contributions in another order; the rest is bitwise.
      const auto ga = a[i].second.grad().to_vector<double>();
      const auto gb = b[i].second.grad().to_vector<double>();
      double worst = 0, scale = 0;
      for (size_t j = 0; j < ga.size(); ++j) {
        worst = std::max(worst, std::abs(ga[j] - gb[j]));
        scale = std::max(scale, std::abs(ga[j]));
      }
      // f64 throughout. Every gradient but the tied embedding's is computed by the same ops in the
      // same order (exact); wte adds its head and embedding halves in another order: a few f64
      // roundings, far below 1e-6 of its scale, which a missing half would exceed by 1e5.
      EXPECT_LE(worst, b[i].first == "wte.weight" ? 1e-6 * scale : 0.0) << b[i].first;
      ++checked;
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(ModelStages, ParametersBelongToTheStageOfTheirLayer) {
  Generator g(1);
  auto model = models::GPT2::random(config_of(4), g);
  // embedding | h.0 h.1 | h.2 h.3 | head
  ModelStages runner(*model, pp::StagePartition{{0, 1, 3, 5}, 6});
  EXPECT_EQ(runner.stage_of_parameter("wte.weight"), 0);
  EXPECT_EQ(runner.stage_of_parameter("wpe.weight"), 0);
  EXPECT_EQ(runner.stage_of_parameter("h.0.attn.c_attn.weight"), 1);
  EXPECT_EQ(runner.stage_of_parameter("h.1.mlp.c_fc.bias"), 1);
  EXPECT_EQ(runner.stage_of_parameter("h.3.ln_2.weight"), 2);
  EXPECT_EQ(runner.stage_of_parameter("ln_f.weight"), 3);
  EXPECT_THROW(runner.stage_of_parameter("encoder.weight"), Error);
  EXPECT_THROW(ModelStages(*model, pp::StagePartition{{0, 2}, 5}), Error);
}

// parallel.pipeline_split: blocks per stage, the embedding with the first and the head with the
// last (which may then hold no block); empty, the balance of the costs; a split of the wrong stage
// count or sum, or a middle stage without a block, refused by value; pipeline_split_of gives the
// split back.
TEST(PipelinePartition, TakesTheSplitOrBalancesAndGivesTheSplitBack) {
  Generator g(1);
  auto model = models::GPT2::random(config_of(7), g);
  const std::vector<pp::LayerCost> costs = pipeline_layer_costs(*model);
  ASSERT_EQ(costs.size(), 9u);
  const pp::StagePartition split = pipeline_partition(costs, 3, "1,4,2");
  EXPECT_EQ(split, (pp::StagePartition{{0, 2, 6}, 9}));  // embedding h.0 | h.1..h.4 | h.5 h.6 head
  EXPECT_EQ(pipeline_split_of(split), "1,4,2");
  // The embedding and the head on stages of their own.
  const pp::StagePartition ends = pipeline_partition(costs, 4, "0,3,4,0");
  EXPECT_EQ(ends, (pp::StagePartition{{0, 1, 4, 8}, 9}));
  EXPECT_EQ(pipeline_split_of(ends), "0,3,4,0");
  EXPECT_EQ(pipeline_partition(costs, 3, ""), pp::balance(costs, 3));
  for (int64_t stages : {2, 3, 5, 9})
    EXPECT_EQ(pipeline_partition(costs, stages, pipeline_split_of(pp::balance(costs, stages))),
              pp::balance(costs, stages));
  auto message = [&](int64_t stages, const std::string& spec) {
    try {
      pipeline_partition(costs, stages, spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(2, "1,4,2").find("gives 3 stages; the schedule has 2"), std::string::npos);
  EXPECT_NE(message(3, "1,4,1").find("sum to 6 but the model has 7 blocks"), std::string::npos);
  EXPECT_NE(message(3, "1,0,6").find("stage 1 has no block"), std::string::npos);
  EXPECT_NE(message(3, "1,x,5").find("not a block count"), std::string::npos);
  EXPECT_NE(message(3, "1,4,2,").find("ends with a comma"), std::string::npos);
}

// The trainer cuts the model its tensor axis has already split, so the layers' costs are tp's
// pieces; the head counts its vocabulary piece as the blocks count theirs, and a dense model is
// cut where the whole model is (what the planner and the serving layouts assume). Before, the
// head counted the whole vocabulary against halved blocks: GPT-2 124M at tp 2 x pp 2 was cut
// after block 10, the whole model after block 8.
TEST(PipelinePartition, TensorParallelPiecesAreCutWhereTheWholeModelIs) {
  DefaultDeviceScope meta(Device::meta());
  for (const std::string spec : {"124M", "355M", "llama:llama2-7b", "llama:mistral-7b"}) {
    const models::ConfigPtr config = resolve_model_config(spec, "model");
    const std::vector<pp::LayerCost> whole = pipeline_layer_costs(*config->build_empty());
    for (int tp : {2, 4}) {
      std::shared_ptr<models::CausalLM> model = config->build_empty();
      parallelize_model(*model, dist::make_meta_communicator(tp, 0, "tp"), "", false, {},
                        /*copy_values=*/false);
      const std::vector<pp::LayerCost> pieces = pipeline_layer_costs(*model);
      EXPECT_LT(pieces.back().cost, whole.back().cost / tp * 1.01) << spec << " tp " << tp;
      for (int64_t stages : {2, 3, 4}) {
        const pp::StagePartition a = pipeline_partition(whole, stages, "");
        const pp::StagePartition b = pipeline_partition(pieces, stages, "");
        for (int64_t s = 0; s < stages; ++s)
          EXPECT_EQ(a.layers_of(s), b.layers_of(s))
              << spec << " tp " << tp << " pp " << stages << " stage " << s;
      }
    }
  }
}

TEST(ScheduleFromSpec, ParsesTheThreeSchedulesAndRefusesOthers) {
  EXPECT_EQ(schedule_from_spec("gpipe", 2, 3).name, "gpipe");
  EXPECT_EQ(schedule_from_spec("1f1b", 4, 7).name, "1f1b");
  const pp::Schedule s = schedule_from_spec("interleaved:3", 2, 4);
  EXPECT_EQ(s.name, "interleaved");
  EXPECT_EQ(s.virtual_stages, 3);
  EXPECT_EQ(schedule_from_spec("interleaved", 2, 4).virtual_stages, 2);
  auto message = [](const std::string& spec, int m) {
    try {
      schedule_from_spec(spec, 2, m);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("interleaved:1", 4).find("must be >= 2"), std::string::npos);
  EXPECT_NE(message("interleaved:x", 4).find("interleaved:V"), std::string::npos);
  EXPECT_NE(message("zero-bubble", 4).find("gpipe, 1f1b"), std::string::npos);
  EXPECT_NE(message("1f1b:2", 4).find("interleaved:V"), std::string::npos);
  EXPECT_NE(message("interleaved:2", 3).find("multiple"), std::string::npos);
}

}  // namespace
}  // namespace tessel::train
