// SPDX-License-Identifier: Apache-2.0
// Mixed precision with the LLaMA family on composed layouts (thread worlds): bf16 under tp 2 with
// sequence parallelism, under tp 4 (each of the 2 KV heads replicated on two ranks) and on the
// (2, 2, 2) grid with ZeRO-3 follows the one-process bf16 run; fp16 with a loss scale that
// changes mid-run follows one process under tp 2 x pp 2, with the same scales on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "layout_run_util.h"
#include "trainer_test_util.h"

namespace tessel::train {
namespace {

using test::kSteps;
using test::Layout;
using test::layout_config;
using test::LayoutRun;
using test::param_distance;
using test::train_on;

// Width 32 in 4 heads of 8 sharing 2 KV heads, SwiGLU 48, RoPE, a tied head; vocabulary 37.
TrainConfig llama_base(const std::filesystem::path& dir, int64_t steps, const std::string& prec) {
  TrainConfig c = test::base_config(dir, 37, steps);  // the dataset, and a GPT-2 config replaced
  const nlohmann::json model = {{"architectures", {"LlamaForCausalLM"}},
                                {"model_type", "llama"},
                                {"vocab_size", 37},
                                {"hidden_size", 32},
                                {"intermediate_size", 48},
                                {"num_hidden_layers", 2},
                                {"num_attention_heads", 4},
                                {"num_key_value_heads", 2},
                                {"max_position_embeddings", 32},
                                {"rms_norm_eps", 1e-5},
                                {"rope_theta", 10000.0},
                                {"tie_word_embeddings", true}};
  std::ofstream(dir / "llama.json") << model.dump(2);
  c.model.config = (dir / "llama.json").string();
  c.train.threads = 1;
  c.train.grad_accum = 2;  // the pipeline's micro-batches
  c.train.precision = prec;
  c.optim.grad_clip = 0.5;  // clips most steps: the norm must count every element once
  return c;
}

// As in precision_layout_test.cpp (its comment derives them): a layout moves a bf16 run about as
// much as bf16 moves it from fp32; a missing or doubled gradient moves the loss by 1e-2 and more.
constexpr double kLossTol = 1e-3, kParamTol = 1e-2;

class PrecisionLlama : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(test::scratch("precision_llama"));
    base_ = new TrainConfig(llama_base(*dir_, kSteps, "bf16"));
    ref_ = new LayoutRun(train_on(layout_config(*base_, Layout{}, "ref"), Layout{}));
    TrainConfig fp32 = layout_config(*base_, Layout{}, "ref_fp32");
    fp32.train.precision = "fp32";
    const LayoutRun f = train_on(fp32, Layout{});
    double shift = 0;
    for (size_t i = 0; i < f.steps[0].size(); ++i)
      shift = std::max(shift,
                       std::abs(f.steps[0][i].loss - ref_->steps[0][i].loss) / f.steps[0][i].loss);
    std::printf("LLaMA bf16 vs fp32 on one process: losses within %.1e, parameters within %.1e\n",
                shift, param_distance(f.checkpoint, ref_->checkpoint));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete ref_;
    delete base_;
    delete dir_;
  }

  static void expect_follows(const Layout& l, const std::string& name) {
    const LayoutRun r = train_on(layout_config(*base_, l, name), l);
    const auto& ref = ref_->steps[0];
    double worst = 0;
    for (int rank = 0; rank < l.dp * l.tp * l.pp; ++rank) {
      ASSERT_EQ(r.steps[rank].size(), size_t(kSteps)) << l.str() << " rank " << rank;
      for (size_t i = 0; i < ref.size(); ++i) {
        const StepRecord& s = r.steps[rank][i];
        const double rel = std::abs(s.loss - ref[i].loss) / ref[i].loss;
        worst = std::max(worst, rel);
        EXPECT_LE(rel, kLossTol) << l.str() << " rank " << rank << " step " << i + 1;
        EXPECT_NEAR(s.grad_norm, ref[i].grad_norm, 10 * kLossTol * ref[i].grad_norm)
            << l.str() << " rank " << rank << " step " << i + 1;
        EXPECT_FALSE(s.skipped);
      }
    }
    const double p = param_distance(ref_->checkpoint, r.checkpoint);
    EXPECT_LE(p, kParamTol) << l.str() << ": final parameters";
    std::printf("LLaMA bf16 %s: losses within %.1e, final parameters within %.1e of one process\n",
                l.str().c_str(), worst, p);
  }

  static std::filesystem::path* dir_;
  static TrainConfig* base_;
  static LayoutRun* ref_;
};
std::filesystem::path* PrecisionLlama::dir_ = nullptr;
TrainConfig* PrecisionLlama::base_ = nullptr;
LayoutRun* PrecisionLlama::ref_ = nullptr;

TEST_F(PrecisionLlama, Bf16TensorSequenceParallelFollowsOneProcess) {
  expect_follows(Layout{1, 2, 1, 0, true}, "tp2_sp");
}

TEST_F(PrecisionLlama, Bf16ReplicatedKvHeadsFollowOneProcess) {
  expect_follows(Layout{1, 4, 1, 0, false}, "tp4");
}

TEST_F(PrecisionLlama, Bf16FullGridFollowsOneProcess) {
  expect_follows(Layout{2, 2, 2, 3, true, "interleaved:2"}, "grid");
}

TEST(PrecisionLlamaFp16, TensorPipelineFollowsOneProcessThroughScaleChanges) {
  const auto dir = test::scratch("precision_llama_fp16");
  test::expect_fp16_follows_one_process(llama_base(dir, 6, "fp16"), Layout{1, 2, 2, 0, false},
                                        kLossTol);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessel::train
