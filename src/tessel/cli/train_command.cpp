// SPDX-License-Identifier: Apache-2.0
// `tessel train`: trains a GPT-2 on a prepared token dataset. The configuration is TOML
// (--config) with `--set section.key=value` overrides, printed resolved at start; `--resume`
// continues a run directory (its newest checkpoint that verifies) or one checkpoint, with the
// configuration stored in the checkpoint unless --config replaces it. `--plan auto --cluster FILE`
// takes the layout of the planner's best plan for the launch's ranks (plan/search.h); with
// `--cluster FILE` the layout's predicted step time and memory go into every JSONL record.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "tessel/cli/commands.h"
#include "tessel/cli/device_option.h"
#include "tessel/cli/model_args.h"
#include "tessel/cli/plan_search.h"
#include "tessel/dist/mesh.h"
#include "tessel/dist/world.h"
#include "tessel/train/checkpoint/checkpoint.h"
#include "tessel/train/global_batch.h"
#include "tessel/train/model_presets.h"
#include "tessel/train/trainer.h"

namespace tessel::cli {

namespace {

namespace fs = std::filesystem;

struct TrainArgs {
  std::string config_file, resume;
  std::vector<std::string> overrides;
  bool print_config = false;
  bool build_only = false;
  int dp = 1, tp = 1, pp = 1, ep = 1;
  bool dp_given = false;     // --ep without --dp: dp is every rank tp and pp leave
  std::string schedule;      // --schedule: parallel.schedule
  bool sp = false;           // --sp: parallel.sequence_parallel
  bool etp = false;          // --etp: parallel.expert_tensor_parallel
  std::string tp_plan;       // --tp-plan: parallel.tp_plan
  std::string device;        // --device: train.device
  int64_t microbatches = 0;  // --microbatches: train.grad_accum
  std::string plan;          // --plan auto: the planner's best layout for the launch
  std::string cluster;       // --cluster: the description the planner predicts for
};

// --plan auto: the best plan of the search over the launch's ranks. Its degrees replace --dp/--tp/
// --pp and its ZeRO stage, recomputation and micro-batches are appended to the overrides, so the
// run is exactly the one its printed flags would start.
plan::PlanResult choose_plan(TrainArgs& a, std::vector<std::string>& overrides,
                             const train::TrainConfig& config, const plan::Cluster& cluster) {
  TESSEL_CHECK(a.plan == "auto", "train --plan: '", a.plan, "' is not 'auto'");
  TESSEL_CHECK(a.dp == 1 && a.tp == 1 && a.pp == 1,
               "train --plan auto chooses the degrees; leave "
               "out --dp ",
               a.dp, " --tp ", a.tp, " --pp ", a.pp);
  const int devices = dist::detect_launch().size;
  const models::ConfigPtr model = train::resolve_model_config(config.model.config);
  const plan::SearchResult res =
      plan::search_plans(*model, cluster, train_search_request(config, devices, model));
  const plan::PlanResult best = plan::best_plan(res);
  a.dp = best.layout.dp;
  a.tp = best.layout.tp;
  a.pp = best.layout.pp;
  const std::vector<std::string> args = best.layout.train_args();
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--set") overrides.push_back(args[i + 1]);
  if (best.layout.pp > 1) overrides.push_back("parallel.schedule=" + best.layout.schedule);
  return best;
}

// The mesh of `mpirun -np N tessel train --dp A --tp B --pp C` (A * B * C = N), checked against the
// launch before any communication.
train::TrainLayout train_layout(TrainArgs a) {
  TESSEL_CHECK(a.dp >= 1 && a.tp >= 1 && a.pp >= 1 && a.ep >= 1,
               "train: parallel degrees must be >= 1, got --dp ", a.dp, " --tp ", a.tp, " --pp ",
               a.pp, " --ep ", a.ep);
  const dist::LaunchInfo launch = dist::detect_launch();
  // The ep groups lie inside the dp group (DeepSpeed-MoE): `--ep N` alone trains data-parallel
  // over every rank with the experts split over groups of N.
  if (a.ep > 1 && !a.dp_given) a.dp = std::max(1, launch.size / (a.tp * a.pp));
  TESSEL_CHECK(a.dp % a.ep == 0, "train: --ep ", a.ep, " must divide the data-parallel degree ",
               a.dp,
               " (--dp, or the ranks tp and pp leave): the expert-parallel groups lie inside ",
               "the data-parallel group");
  const int n = a.dp * a.tp * a.pp;
  TESSEL_CHECK(launch.size == n, "train: --dp ", a.dp, " x --tp ", a.tp, " x --pp ", a.pp, " = ", n,
               " ranks, but the job has ", launch.size, " (", launch.describe(),
               "); start it with mpirun -np ", n, " or change the degrees");
  if (n == 1) return {};
  return train::make_layout(dist::init_world(), a.dp, a.tp, a.pp, a.ep);
}

void run_train(const TrainArgs& args) {
  std::vector<std::string> overrides = args.overrides;
  if (!args.schedule.empty()) overrides.push_back("parallel.schedule=" + args.schedule);
  if (args.sp) overrides.push_back("parallel.sequence_parallel=true");
  if (args.etp) overrides.push_back("parallel.expert_tensor_parallel=true");
  if (!args.tp_plan.empty()) overrides.push_back("parallel.tp_plan=" + args.tp_plan);
  if (!args.device.empty()) overrides.push_back("train.device=" + args.device);
  if (args.microbatches > 0)
    overrides.push_back("train.grad_accum=" + std::to_string(args.microbatches));
  std::string checkpoint;
  std::string text, source = "<defaults>";
  if (!args.config_file.empty()) {
    text = read_text_file(args.config_file, "train --config");
    source = args.config_file;
  }
  if (!args.resume.empty()) {
    std::vector<std::string> refused;
    const train::CheckpointInfo info = train::resolve_resume(args.resume, &refused);
    for (const auto& r : refused) std::cerr << "warning: checkpoint refused: " << r << "\n";
    checkpoint = info.path;
    if (args.config_file.empty()) {
      source = (fs::path(checkpoint) / "train.toml").string();
      text = read_text_file(source, "train --resume");
    }
    // The run continues where its checkpoints are, wherever it was started from.
    bool dir_overridden = false;
    for (const auto& o : overrides) dir_overridden |= o.rfind("checkpoint.dir=", 0) == 0;
    if (!dir_overridden) {
      overrides.insert(overrides.begin(),
                       "checkpoint.dir=" + fs::path(checkpoint).parent_path().string());
    }
  }
  TrainArgs degrees = args;
  std::optional<plan::Cluster> cluster;
  if (!args.cluster.empty()) cluster = plan::Cluster::load(args.cluster);
  std::optional<plan::PlanResult> chosen;
  if (!args.plan.empty()) {
    TESSEL_CHECK(cluster,
                 "train --plan auto needs --cluster FILE (the machines to plan for: "
                 "configs/clusters/ or `tessel plan calibrate`)");
    chosen = choose_plan(degrees, overrides, train::TrainConfig::parse(text, overrides, source),
                         *cluster);
  }
  const train::TrainConfig config = train::TrainConfig::parse(text, overrides, source);
  const train::TrainLayout layout = train_layout(degrees);
  const bool leader = layout.world_rank() == 0;
  if (leader && chosen)
    std::cout << "# plan auto: " << chosen->layout.str() << ", predicted "
              << 1e3 * chosen->step_seconds << " ms per step, " << int64_t(chosen->memory.peak())
              << " bytes per rank (tessel train " << join_args(chosen->layout.train_args()) << ")"
              << std::endl;
  if (leader)
    std::cout << "# tessel train: resolved configuration\n" << config.to_toml() << std::endl;
  if (args.print_config) return;
  std::optional<train::PlanPrediction> prediction;
  if (cluster) {
    // The prediction for the layout that runs, whether chosen or given by hand.
    const models::ConfigPtr model = train::resolve_model_config(config.model.config);
    const int dp = layout.dp_size();
    train::TrainConfig resolved = config;
    resolved.train.grad_accum = train::resolve_global_batch(config.train, dp).grad_accum;
    const plan::PlanResult p = plan::predict_layout(
        *model, *cluster, train_search_request(config, layout.world_size(), model),
        train_layout_of(resolved, dp, layout.tp_size(), layout.pp_size()));
    if (p.status == plan::PlanStatus::NotModelled) {
      if (leader) std::cout << "# no prediction: " << p.reason << std::endl;
    } else {
      prediction =
          train::PlanPrediction{p.layout.str(), 1e3 * p.step_seconds, int64_t(p.memory.peak()),
                                int64_t(p.memory.state()), int64_t(p.memory.step())};
      if (leader)
        std::cout << "# predicted: " << prediction->layout << ": " << prediction->step_ms
                  << " ms per step, " << prediction->mem_peak_bytes << " bytes per rank ("
                  << plan::status_name(p.status) << ")" << std::endl;
    }
  }
  train::TrainerHooks hooks;
  hooks.build_only = args.build_only;
  train::Trainer trainer(config, checkpoint, std::move(hooks), layout);
  if (args.build_only) {
    if (leader) std::cout << "done: model built (--build-only)" << std::endl;
    return;
  }
  if (prediction) trainer.set_prediction(*prediction);
  const train::TrainSummary sum = trainer.run();
  // A failed write stopped the run after a checkpoint: rank 0 reports it and exits non-zero.
  if (!sum.error.empty()) {
    if (leader) TESSEL_FAIL(sum.error);
    return;
  }
  if (leader && !sum.interrupted) {
    std::cout << "done: " << sum.last_step << " steps, ";
    if (sum.val_loss) {
      std::cout << "val loss " << *sum.val_loss;
    } else {
      std::cout << "no validation split";
    }
    std::cout << ", " << sum.skipped_steps << " skipped, " << int64_t(sum.seconds) << " s"
              << std::endl;
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a GPT-2 on a token dataset prepared with `tessel data prepare`");
  add_device_option(*cmd, &args->device);
  cmd->add_option("-c,--config", args->config_file,
                  "TOML configuration (keys: docs/TRAINING.md); defaults when omitted");
  cmd->add_option("--set", args->overrides,
                  "Override one key, e.g. --set optim.lr=3e-4 (repeatable, applied in order)");
  cmd->add_option("--resume", args->resume,
                  "Continue a run directory (its newest complete checkpoint) or one checkpoint");
  cmd->add_option("--dp", args->dp,
                  "Data-parallel ranks: run under mpirun -np N (or srun, torchrun) with --dp N")
      ->capture_default_str();
  cmd->add_option("--tp", args->tp, "Tensor-parallel ranks (dp x tp x pp = the number of ranks)")
      ->capture_default_str();
  cmd->add_option("--pp", args->pp, "Pipeline-parallel stages (dp x tp x pp = the number of ranks)")
      ->capture_default_str();
  cmd->add_option("--ep", args->ep,
                  "Expert-parallel ranks: each MoE layer's experts split over groups of N "
                  "data-parallel ranks (N divides dp; without --dp, dp = the number of ranks)")
      ->capture_default_str();
  cmd->add_flag("--sp", args->sp,
                "Sequence parallelism with --tp: norms and dropouts on sequence pieces "
                "(--set parallel.sequence_parallel=true)");
  cmd->add_flag("--etp", args->etp,
                "Expert tensor parallelism with --tp: each MoE expert's FFN split over tp "
                "(--set parallel.expert_tensor_parallel=true)");
  cmd->add_option("--tp-plan", args->tp_plan,
                  "Tensor-parallel plan JSON, e.g. from `tessel plan shard` "
                  "(--set parallel.tp_plan=...; default: the model family's plan)");
  cmd->add_option("--schedule", args->schedule,
                  "Pipeline schedule: gpipe, 1f1b or interleaved:V (--set parallel.schedule=...)");
  cmd->add_option("--microbatches", args->microbatches,
                  "Pipeline micro-batches per step (--set train.grad_accum=...)");
  cmd->add_option("--plan", args->plan,
                  "auto: the planner's best layout for this launch's ranks (needs --cluster); "
                  "replaces --dp/--tp/--pp, parallel.zero_stage, train.recompute and the "
                  "micro-batches")
      ->check(CLI::IsMember({"auto"}));
  cmd->add_option("--cluster", args->cluster,
                  "Cluster description (TOML) to plan for; the layout's predicted step time and "
                  "memory are written to the JSONL beside the measured ones");
  cmd->add_flag("--print-config", args->print_config, "Print the resolved configuration and exit");
  cmd->add_flag("--build-only", args->build_only,
                "Build the model in the layout (each rank its share), report its memory in the "
                "log and exit");
  cmd->callback([args, cmd] {
    args->dp_given = cmd->count("--dp") > 0;
    run_train(*args);
  });
}

}  // namespace tessel::cli
