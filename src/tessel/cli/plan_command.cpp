// SPDX-License-Identifier: Apache-2.0
// `tessel plan`: the planner's command (docs/PLANNER.md). Its subcommands live in their own files
// and register here: `plan calibrate` (plan_calibrate_command.cpp), `plan trace`
// (plan_trace_command.cpp), `plan shard` (plan_shard_command.cpp), `plan memory`
// (plan_memory_command.cpp), `plan search` (plan_search_command.cpp), `plan offload`
// (plan_offload_command.cpp). Without a subcommand,
// `tessel plan --model M --cluster F --global-batch B` prints the ranked plans as `plan search`
// does (issue 20's `tessel plan`), and with `--check` runs the top ones here (plan_check.cpp).
#include "tessel/cli/commands.h"
#include "tessel/cli/plan_search.h"

namespace tessel::cli {

void add_plan_command(CLI::App& app) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Plan how a model is spread over a cluster: with --model, --cluster and --global-batch, the "
      "ranked training layouts (as `plan search`); or one of the subcommands");
  plan->require_subcommand(0, 1);
  add_plan_search_options(*plan);
  add_plan_calibrate_command(*plan);
  add_plan_trace_command(*plan);
  add_plan_shard_command(*plan);
  add_plan_memory_command(*plan);
  add_plan_search_command(*plan);
  add_plan_offload_command(*plan);
}

}  // namespace tessel::cli
