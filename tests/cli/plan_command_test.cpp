// SPDX-License-Identifier: Apache-2.0
// `tessel plan trace` run as a program: the JSON a user reads agrees with itself and with the
// family's formula, the table names the modules, and bad input is one clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_run.h"

namespace tessel::cli_test {
namespace {

TEST(PlanTrace, JsonTotalsAndModules) {
  const fs::path dir = scratch("plan_", "json");
  const Outcome r = run_tessel("plan trace --model tiny --batch 3 --seq 13 --json --depth 1", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& g = j.at("graph");
  const double fwd = g.at("totals").at("forward").at("matmul_flops").get<double>();
  const double bwd = g.at("totals").at("backward").at("matmul_flops").get<double>();
  EXPECT_GT(fwd, 0);
  EXPECT_DOUBLE_EQ(bwd, 2 * fwd);
  EXPECT_DOUBLE_EQ(g.at("totals").at("step").at("matmul_flops").get<double>(), fwd + bwd);
  // The matmul FLOPs stay below the formula, which also counts biases and norms as 6N.
  EXPECT_LT(fwd + bwd, j.at("formula_model_flops").get<double>() * 14.0 / 13.0);
  EXPECT_GT(g.at("saved_activation_bytes").get<double>(), 0);
  // The root and the depth-1 modules (wte, wpe, drop, h, ln_f, ...), none deeper.
  bool blocks = false;
  for (const auto& m : g.at("modules")) {
    EXPECT_LE(m.at("depth").get<int>(), 1);
    blocks = blocks || m.at("path") == "h";
  }
  EXPECT_TRUE(blocks);
  EXPECT_FALSE(g.contains("ops"));
}

TEST(PlanTrace, TableAndRecompute) {
  const fs::path dir = scratch("plan_", "table");
  const Outcome none = run_tessel("plan trace -m llama:tiny -b 1 -t 7", dir);
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.out.find("layers.0"), std::string::npos) << none.out;
  EXPECT_NE(none.out.find("saved activations"), std::string::npos);
  const Outcome full =
      run_tessel("plan trace -m llama:tiny -b 1 -t 7 --recompute full --json", dir);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const nlohmann::json j = nlohmann::json::parse(full.out);
  EXPECT_GT(j.at("graph").at("totals").at("recompute").at("ops").get<int>(), 0);
}

TEST(PlanTrace, BadInputIsOneClearError) {
  const fs::path dir = scratch("plan_", "bad");
  const Outcome model = run_tessel("plan trace --model no-such-model --seq 8", dir);
  EXPECT_NE(model.exit_code, 0);
  EXPECT_NE(model.err.find("no-such-model"), std::string::npos) << model.err;
  const Outcome seq = run_tessel("plan trace --model tiny --seq 100000", dir);
  EXPECT_NE(seq.exit_code, 0);
  EXPECT_NE(seq.err.find("100000"), std::string::npos) << seq.err;
  const Outcome mode = run_tessel("plan trace --model tiny --recompute most", dir);
  EXPECT_NE(mode.exit_code, 0);
}

// `tessel plan memory` over tensor and pipeline parallelism: every pipeline rank predicted, the
// figures shrink by the axes, and the schedule decides the in-flight activations.
TEST(PlanMemory, TensorAndPipelineRanks) {
  const fs::path dir = scratch("plan_", "memory");
  const std::string base = "plan memory --model tiny --micro-batch 2 --seq 13 --json";
  auto json = [&](const std::string& extra) {
    const Outcome r = run_tessel(base + " " + extra, dir);
    EXPECT_EQ(r.exit_code, 0) << extra << ": " << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const nlohmann::json one = json("");
  const nlohmann::json tp = json("--tp 2");
  ASSERT_TRUE(one.contains("state_bytes") && tp.contains("state_bytes"));
  // The vocabulary and the blocks' products split in two, the norms and biases do not.
  EXPECT_LT(tp.at("state_bytes").get<double>(), 0.6 * one.at("state_bytes").get<double>());
  EXPECT_GT(tp.at("state_bytes").get<double>(), 0.5 * one.at("state_bytes").get<double>());
  const nlohmann::json gpipe = json("--pp 2 --schedule gpipe --grad-accum 4");
  const nlohmann::json f1b = json("--pp 2 --schedule 1f1b --grad-accum 4");
  ASSERT_EQ(gpipe.at("pp_ranks").size(), 2u);
  ASSERT_EQ(f1b.at("pp_ranks").size(), 2u);
  // Rank 0 holds all four micro-batches under GPipe, two under 1F1B.
  EXPECT_GT(gpipe.at("pp_ranks")[0].at("step_peak_bytes").get<double>(),
            f1b.at("pp_ranks")[0].at("step_peak_bytes").get<double>());
  // The same stages: the same state.
  EXPECT_EQ(gpipe.at("pp_ranks")[1].at("state_bytes"), f1b.at("pp_ranks")[1].at("state_bytes"));
  const Outcome bad = run_tessel(base + " --pp 2 --schedule zigzag", dir);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("zigzag"), std::string::npos) << bad.err;
}

// `tessel plan --serve`: the ranked serving layouts as JSON (tessel's own with the command that
// runs them, the paper's others marked as predictions), and the errors a user meets as one line.
fs::path serve_cluster(const fs::path& dir) {
  const fs::path p = dir / "two.toml";
  std::ofstream(p) << "name = \"two\"\ndevices_per_node = 2\nnodes = 1\n[device]\nkind = \"t\"\n"
                      "memory_bytes = 1073741824\nmemory_bandwidth = 2e10\n"
                      "[device.peak_flops]\nf32 = 1e11\n"
                      "[links.intra_node]\nbandwidth = 5e9\nlatency = 5e-6\n";
  return p;
}

TEST(PlanServe, RankedLayoutsAsJson) {
  const fs::path dir = scratch("plan_", "serve");
  const std::string cluster = serve_cluster(dir).string();
  const Outcome r = run_tessel("plan --serve --model tiny --cluster " + cluster +
                                   " --prompt 7 --gen 13 --batch 1 --batch 4 --top 100 --json",
                               dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j.at("decode").empty());
  ASSERT_FALSE(j.at("prefill").empty());
  bool tp2 = false, predicted = false;
  double last = 0;
  for (const auto& row : j.at("decode")) {
    // Ranked by cost per token.
    EXPECT_GE(row.at("chip_seconds_per_token").get<double>(), last);
    last = row.at("chip_seconds_per_token").get<double>();
    if (row.at("runnable").get<bool>()) {
      const std::string cmd = row.at("command").get<std::string>();
      EXPECT_NE(cmd.find("tessel serve"), std::string::npos) << cmd;
      if (row.at("tp").get<int>() == 2 && row.at("pp").get<int>() == 1) {
        tp2 = true;
        EXPECT_NE(cmd.find("mpirun -np 2"), std::string::npos) << cmd;
        EXPECT_NE(cmd.find("--tp 2"), std::string::npos) << cmd;
      }
    } else {
      predicted = true;
      EXPECT_FALSE(row.contains("command"));
      EXPECT_NE(row.at("prediction_only").get<std::string>().find("prediction only"),
                std::string::npos);
    }
  }
  EXPECT_TRUE(tp2);
  EXPECT_TRUE(predicted);
}

TEST(PlanServe, ErrorsAreOneLine) {
  const fs::path dir = scratch("plan_", "serve_bad");
  const std::string cluster = serve_cluster(dir).string();
  const Outcome model = run_tessel("plan --serve --model no-such-model --cluster " + cluster, dir);
  EXPECT_NE(model.exit_code, 0);
  EXPECT_NE(model.err.find("no-such-model"), std::string::npos) << model.err;
  EXPECT_EQ(std::count(model.err.begin(), model.err.end(), '\n'), 1) << model.err;
  // A latency no layout reaches names the best one can have.
  const Outcome fast = run_tessel(
      "plan --serve --model tiny --cluster " + cluster + " --prompt 7 --gen 13 --latency-ms 1e-9",
      dir);
  EXPECT_NE(fast.exit_code, 0);
  EXPECT_NE(fast.err.find("--latency-ms 1e-09"), std::string::npos) << fast.err;
  EXPECT_NE(fast.err.find("the best achievable is"), std::string::npos) << fast.err;
  EXPECT_EQ(std::count(fast.err.begin(), fast.err.end(), '\n'), 1) << fast.err;
  const Outcome cl =
      run_tessel("plan --serve --model tiny --cluster " + (dir / "none.toml").string(), dir);
  EXPECT_NE(cl.exit_code, 0);
  EXPECT_NE(cl.err.find("none.toml"), std::string::npos) << cl.err;
}

}  // namespace
}  // namespace tessel::cli_test
