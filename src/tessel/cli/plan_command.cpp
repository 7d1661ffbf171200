// SPDX-License-Identifier: Apache-2.0
// `tessel plan`: the planner's command (docs/PLANNER.md). Its subcommands live in their own files
// and register here: `plan calibrate` (plan_calibrate_command.cpp), `plan trace`
// (plan_trace_command.cpp), `plan shard` (plan_shard_command.cpp), `plan memory`
// (plan_memory_command.cpp), `plan search` (plan_search_command.cpp).
#include "tessel/cli/commands.h"

namespace tessel::cli {

void add_plan_command(CLI::App& app) {
  CLI::App* plan = app.add_subcommand("plan", "Plan how a model is spread over a cluster");
  plan->require_subcommand(1);
  add_plan_calibrate_command(*plan);
  add_plan_trace_command(*plan);
  add_plan_shard_command(*plan);
  add_plan_memory_command(*plan);
  add_plan_search_command(*plan);
}

}  // namespace tessel::cli
