// SPDX-License-Identifier: Apache-2.0
// `tessel train`: trains a GPT-2 on a prepared token dataset. The configuration is TOML
// (--config) with `--set section.key=value` overrides, printed resolved at start; `--resume`
// continues a run directory (its newest checkpoint that verifies) or one checkpoint, with the
// configuration stored in the checkpoint unless --config replaces it.
#include <filesystem>
#include <iostream>

#include "tessel/cli/commands.h"
#include "tessel/cli/model_args.h"
#include "tessel/dist/mesh.h"
#include "tessel/dist/world.h"
#include "tessel/train/checkpoint/checkpoint.h"
#include "tessel/train/trainer.h"

namespace tessel::cli {

namespace {

namespace fs = std::filesystem;

struct TrainArgs {
  std::string config_file, resume;
  std::vector<std::string> overrides;
  bool print_config = false;
  int dp = 1, tp = 1, pp = 1;
  std::string schedule;      // --schedule: parallel.schedule
  bool sp = false;           // --sp: parallel.sequence_parallel
  std::string tp_plan;       // --tp-plan: parallel.tp_plan
  int64_t microbatches = 0;  // --microbatches: train.grad_accum
};

// The mesh of `mpirun -np N tessel train --dp A --tp B --pp C` (A * B * C = N), checked against the
// launch before any communication.
train::TrainLayout train_layout(const TrainArgs& a) {
  TESSEL_CHECK(a.dp >= 1 && a.tp >= 1 && a.pp >= 1,
               "train: parallel degrees must be >= 1, got --dp ", a.dp, " --tp ", a.tp, " --pp ",
               a.pp);
  const int n = a.dp * a.tp * a.pp;
  const dist::LaunchInfo launch = dist::detect_launch();
  TESSEL_CHECK(launch.size == n, "train: --dp ", a.dp, " x --tp ", a.tp, " x --pp ", a.pp, " = ", n,
               " ranks, but the job has ", launch.size, " (", launch.describe(),
               "); start it with mpirun -np ", n, " or change the degrees");
  if (n == 1) return {};
  return train::make_layout(dist::init_world(), a.dp, a.tp, a.pp);
}

void run_train(const TrainArgs& args) {
  std::vector<std::string> overrides = args.overrides;
  if (!args.schedule.empty()) overrides.push_back("parallel.schedule=" + args.schedule);
  if (args.sp) overrides.push_back("parallel.sequence_parallel=true");
  if (!args.tp_plan.empty()) overrides.push_back("parallel.tp_plan=" + args.tp_plan);
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
  const train::TrainConfig config = train::TrainConfig::parse(text, overrides, source);
  const train::TrainLayout layout = train_layout(args);
  const bool leader = layout.world_rank() == 0;
  if (leader)
    std::cout << "# tessel train: resolved configuration\n" << config.to_toml() << std::endl;
  if (args.print_config) return;
  train::Trainer trainer(config, checkpoint, {}, layout);
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
  cmd->add_flag("--sp", args->sp,
                "Sequence parallelism with --tp: norms and dropouts on sequence pieces "
                "(--set parallel.sequence_parallel=true)");
  cmd->add_option("--tp-plan", args->tp_plan,
                  "Tensor-parallel plan JSON, e.g. from `tessel plan shard` "
                  "(--set parallel.tp_plan=...; default: the model family's plan)");
  cmd->add_option("--schedule", args->schedule,
                  "Pipeline schedule: gpipe, 1f1b or interleaved:V (--set parallel.schedule=...)");
  cmd->add_option("--microbatches", args->microbatches,
                  "Pipeline micro-batches per step (--set train.grad_accum=...)");
  cmd->add_flag("--print-config", args->print_config, "Print the resolved configuration and exit");
  cmd->callback([args] { run_train(*args); });
}

}  // namespace tessel::cli
