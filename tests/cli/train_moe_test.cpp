// SPDX-License-Identifier: Apache-2.0
// `tessel train` on a GPT-2-MoE from a config file: the loss falls over a tiny run, every JSONL
// step record carries the auxiliary loss and each MoE layer's load (tokens per expert, dropped
// pairs, its losses) consistent with the batch; the checkpoint is a model `tessel generate` reads;
// bad expert settings fail with one line naming the key.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <numeric>

#include "train_workspace.h"

namespace tessel::cli_test {
namespace {

struct RemoveOnExit {
  fs::path dir;
  ~RemoveOnExit() { fs::remove_all(dir); }
};

// The workspace's tiny GPT-2 turned into a GPT-2-MoE: 3 GELU experts top-2 in block 1.
void write_moe_config(const Workspace& s, const std::string& extra) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(s.dir / "config.json"));
  j["model_type"] = "gpt2_moe";
  j["architectures"] = {"GPT2MoELMHeadModel"};
  j["num_experts"] = 3;
  j["top_k"] = 2;
  j["capacity_factor"] = 1.0;
  j["z_loss_coef"] = 0.001;
  j.update(nlohmann::json::parse(extra));
  std::ofstream(s.dir / "config.json") << j.dump(2);
}

TEST(TrainMoE, LossFallsAndTheLogHasExpertLoads) {
  const Workspace s = make_workspace("moe");
  RemoveOnExit cleanup{s.dir};
  write_moe_config(s, "{}");
  const fs::path run = s.dir / "run";
  const Outcome t =
      run_tessel(s.common + " --set train.steps=40 --set checkpoint.dir=" + run.string() +
                     " --set log.jsonl=log.jsonl",
                 s.dir);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("GPT-2-MoE"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("| aux "), std::string::npos) << t.out;
  const std::vector<nlohmann::json> steps = steps_of(run / "log.jsonl");
  ASSERT_EQ(steps.size(), 40u);
  const int64_t tokens = 4 * 16, k = 2;  // micro_batch x seq_len, top_k
  for (const nlohmann::json& r : steps) {
    ASSERT_TRUE(r.contains("aux_loss") && r.contains("experts")) << r.dump();
    EXPECT_GT(r["aux_loss"].get<double>(), 0.0);
    ASSERT_EQ(r["experts"].size(), 1u);
    const nlohmann::json& e = r["experts"][0];
    EXPECT_EQ(e["layer"], 1);
    EXPECT_EQ(e["tokens"], tokens);
    EXPECT_EQ(e["capacity"], (tokens * k + 2) / 3);  // ceil(1.0 x 64 x 2 / 3)
    const auto load = e["tokens_per_expert"].get<std::vector<int64_t>>();
    ASSERT_EQ(load.size(), 3u);
    EXPECT_EQ(std::accumulate(load.begin(), load.end(), int64_t(0)) + e["dropped"].get<int64_t>(),
              tokens * k);
    // aux = 0.01 x balance + 0.001 x z (the config's coefficients), summed in f32: a few ulps.
    const double aux = e["aux_loss"].get<double>();
    EXPECT_NEAR(aux, 0.01 * e["balance_loss"].get<double>() + 0.001 * e["z_loss"].get<double>(),
                4 * double(FLT_EPSILON) * std::abs(aux));
    EXPECT_NEAR(r["aux_loss"].get<double>(), e["aux_loss"].get<double>(), 1e-9);
  }
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += steps[size_t(i)]["loss"].get<double>();
    last += steps[steps.size() - 1 - size_t(i)]["loss"].get<double>();
  }
  EXPECT_LT(last, first - 0.5) << "mean loss of the first 5 steps " << first / 5
                               << ", of the last 5 " << last / 5;
  const Outcome g =
      run_tessel("generate -m " + (run / "step_000040").string() + " -p \"The \" -n 5", s.dir);
  EXPECT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("The ", 0), 0u) << g.out;
}

TEST(TrainMoE, BadExpertSettingsFailWithOneLine) {
  const Workspace s = make_workspace("moe_bad");
  RemoveOnExit cleanup{s.dir};
  const std::string run = " --set checkpoint.dir=" + (s.dir / "run").string();
  for (const auto& [extra, expect] :
       {std::pair<std::string, std::string>{R"({"top_k": 4})", "'top_k' 4 exceeds 'num_experts' 3"},
        std::pair<std::string, std::string>{R"({"capacity_factor": 0})",
                                            "'capacity_factor' 0 must be > 0"}}) {
    write_moe_config(s, extra);
    const Outcome r = run_tessel(s.common + run + " --set train.steps=5", s.dir);
    EXPECT_EQ(r.exit_code, 1) << extra;
    EXPECT_NE(r.err.find(expect), std::string::npos) << extra << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace tessel::cli_test
