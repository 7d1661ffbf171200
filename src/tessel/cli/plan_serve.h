// SPDX-License-Identifier: Apache-2.0
// `tessel plan --serve` (plan_serve_command.cpp): the serving plans' options on `tessel plan`,
// which shares --model, --cluster, --devices, --top and --json with the training search.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/plan/serve_search.h"

namespace tessel::cli {

struct ServePlanArgs {
  bool enabled = false;  // --serve
  std::string model, cluster;
  int devices = 0;  // 0: the description's
  int top = 10;
  bool json = false;
  double latency_ms = 0, prefill_ms = 0;
  int64_t prompt = 128, gen = 128;
  std::vector<int64_t> batches;
  std::string weights = "f32", kv_dtype = "f32";
  // The engine's step (`tessel serve --max-batch-tokens`, `--max-seqs`; 0: each row's batch).
  int64_t max_batch_tokens = 512, max_seqs = 0;
};

// The --serve options on `plan` (the shared ones are the search's).
void add_plan_serve_options(CLI::App& plan, const std::shared_ptr<ServePlanArgs>& args);
void run_serve_plan(ServePlanArgs args);

}  // namespace tessel::cli
