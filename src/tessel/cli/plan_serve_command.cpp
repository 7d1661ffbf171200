// SPDX-License-Identifier: Apache-2.0
// `tessel plan --serve --model M --cluster F [--devices N] [--latency-ms MS]`: serving plans
// (plan/serve_search.h, Pope et al. 2022) for prefill and for decode, each a ranked table (or
// --json) with latency, cost per token, MFU, KV cache and weights per rank and the largest batch
// the memory holds, and the `tessel serve` command of every layout tessel runs; the others are
// printed as predictions. The weights a tensor-parallel rank holds are counted by applying the
// runtime's own split to the model on meta (plan_layout.h). docs/PLANNER.md, "Serving plans".
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "tessel/cli/plan_layout.h"
#include "tessel/cli/plan_serve.h"
#include "tessel/cli/pp_model.h"
#include "tessel/core/error.h"
#include "tessel/dist/meta/meta_communicator.h"
#include "tessel/serve/engine_options.h"
#include "tessel/serve/pipeline_stage_model.h"
#include "tessel/serve/step_memory.h"
#include "tessel/tensor/default_device.h"
#include "tessel/train/model_expert_pieces.h"
#include "tessel/train/model_presets.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::cli {
namespace {

int dtype_bytes(const std::string& d) {
  return d == "f32" ? 4 : d == "int8" ? 1 : 2;
}

// Weights of tensor-parallel rank 0 of `tp`: the runtime's plan applied to the model on meta.
int64_t tp_rank_weights(const models::ModelConfig& config, int tp) {
  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (tp > 1) {
    plan::MemoryLayout layout;
    set_tensor_parallel(layout, tp, 0, "", false);
    layout.tp_transform(*model);
  }
  std::set<const void*> seen;
  int64_t n = 0;
  for (const Tensor& p : model->parameters())
    if (seen.insert(p.storage_ptr().get()).second) n += p.numel();
  return n;
}

// Serving memory of tensor-parallel rank 0 of pipeline stage `stage` of `pp`, each stage split
// over `tp`: generation traced on meta with the runtime's splits (the stage bounds
// `tessel generate --pp` cuts, its tensor-parallel plan and vocabulary gather, hidden states and
// logits passed over shape-only communicators; plan/serve_memory.h); each request traced once.
plan::ServeMemoryFn traced_serve_memory(const models::ModelConfig& config) {
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t>;
  auto seen = std::make_shared<std::map<Key, plan::ServeMemory>>();
  return [&config, seen](int tp, int pp, int stage, int64_t batch, int64_t prompt,
                         int64_t capacity) {
    const Key key{tp, pp, stage, batch, prompt, capacity};
    if (auto it = seen->find(key); it != seen->end()) return it->second;
    plan::ServeRankModel rank;
    auto state = std::make_shared<train::ModelTensorParallel>();
    plan::ServeRankModel::FullLogits full;
    if (tp > 1) {
      rank.transform = [state, tp](models::CausalLM& model) {
        const dist::CommPtr comm = dist::make_meta_communicator(tp, 0, "tp");
        *state = train::parallelize_model(model, comm, "", false);
        // A mixture of experts: each expert's FFN columns over tp, as the loaders split them.
        (void)train::split_experts_over_tp(model, comm);
      };
      full = [state](const Tensor& local) { return train::model_tp_full_logits(*state, local); };
    }
    if (pp > 1) {
      std::vector<int64_t> bounds;
      {
        DefaultDeviceScope meta(Device::meta());
        const std::shared_ptr<models::CausalLM> whole = config.build_empty();
        bounds = pp_stage_bounds(whole->layer_costs(), whole->num_layers(), pp);
      }
      // As `tessel generate --pp`: one micro-batch, the logits broadcast to every rank.
      rank.stage = [bounds, pp, stage, full](std::shared_ptr<models::CausalLM> model) {
        return std::shared_ptr<models::CausalLM>(std::make_shared<serve::PipelineStageModel>(
            std::move(model), dist::make_meta_communicator(pp, stage, "pp"), bounds, 1,
            serve::PipelineStageModel::LogitsTo::kEveryRank, full));
      };
    } else {
      rank.full_logits = full;
    }
    return (*seen)[key] = plan::trace_serve_memory(config, batch, prompt, capacity, rank);
  };
}

// The largest step `tessel serve` runs for a row of one process (tp and pp ranks also mirror or
// pass the step, which is not traced): --max-batch-tokens tokens of --max-seqs sequences (the
// row's batch by default), every one sampled, the longest at prompt + gen keys
// (serve/step_memory.h); each traced once.
std::function<std::optional<int64_t>(const plan::ServeRow&)> engine_step_memory(
    const models::ModelConfig& config, const ServePlanArgs& a) {
  auto seen = std::make_shared<std::map<int64_t, int64_t>>();
  return [&config, a, seen](const plan::ServeRow& r) -> std::optional<int64_t> {
    if (!r.not_runnable.empty() || r.layout.chips() > 1) return std::nullopt;
    const int64_t seqs = std::min(a.max_seqs > 0 ? a.max_seqs : r.batch, a.max_batch_tokens);
    if (auto it = seen->find(seqs); it != seen->end()) return it->second;
    serve::EngineOptions options;
    options.max_batch_tokens = a.max_batch_tokens;
    options.max_seqs = seqs;
    return (*seen)[seqs] = serve::trace_step_memory(config, options, a.max_batch_tokens, seqs,
                                                    a.prompt + a.gen);
  };
}

std::string serve_command(const ServePlanArgs& a, const plan::ServeRow& r) {
  if (!r.not_runnable.empty()) return "";
  const bool dir = std::filesystem::is_directory(a.model);
  std::string cmd = r.layout.chips() > 1
                        ? "mpirun -np " + std::to_string(r.layout.chips()) + " tessel serve"
                        : "tessel serve";
  cmd += " -m " + (dir ? a.model : std::string("MODEL_DIR"));
  if (r.layout.ep > 1) cmd += " --ep " + std::to_string(r.layout.ep);
  if (r.layout.tp > 1) cmd += " --tp " + std::to_string(r.layout.tp);
  if (r.layout.pp > 1) cmd += " --pp " + std::to_string(r.layout.pp);
  if (a.weights != "f32") cmd += " --weights " + a.weights;
  cmd += " --max-seqs " + std::to_string(a.max_seqs > 0 ? a.max_seqs : r.batch);
  if (a.max_batch_tokens != serve::EngineOptions{}.max_batch_tokens)
    cmd += " --max-batch-tokens " + std::to_string(a.max_batch_tokens);
  cmd += " --max-model-len " + std::to_string(a.prompt + a.gen);
  return cmd;
}

nlohmann::json row_json(const ServePlanArgs& a, const plan::ServeRow& r) {
  const plan::ServeCost& c = r.cost;
  nlohmann::json j{{"phase", plan::serve_phase_name(r.phase)},
                   {"layout", r.layout.describe()},
                   {"ffn", plan::ffn_layout_name(r.layout.ffn)},
                   {"attention", plan::attention_sharding_name(r.layout.attention)},
                   {"tp", r.layout.tp},
                   {"x", r.layout.x},
                   {"pp", r.layout.pp},
                   {"ep", r.layout.ep},
                   {"chips", r.layout.chips()},
                   {"batch", r.batch},
                   {"seconds", c.seconds},
                   {"latency_ms", 1e3 * c.latency_per_token},
                   {"compute_ms", 1e3 * c.compute_seconds},
                   {"memory_ms", 1e3 * c.memory_seconds},
                   {"overhead_ms", 1e3 * c.overhead_seconds},
                   {"comm_ms", 1e3 * c.comm_seconds},
                   {"pipeline_ms", 1e3 * c.pipeline_seconds},
                   {"load_ms", 1e3 * c.load_seconds},
                   {"chip_seconds_per_token", c.chip_seconds_per_token},
                   {"tokens_per_s", 1.0 / c.chip_seconds_per_token * r.layout.chips()},
                   {"mfu", c.mfu},
                   {"weight_bytes_per_rank", c.weight_bytes_per_rank},
                   {"kv_bytes_per_token_per_rank", c.kv_bytes_per_token_per_rank},
                   {"kv_bytes_per_rank", c.kv_bytes_per_rank},
                   {"workspace_bytes_per_rank", c.workspace_bytes_per_rank},
                   {"workspace_traced", c.workspace_traced},
                   {"stage_above_model_bytes", c.stage_above_model_bytes},
                   {"peak_bytes_per_rank", c.peak_bytes_per_rank},
                   {"max_batch", c.max_batch},
                   {"meets_target", r.meets_target},
                   {"runnable", r.not_runnable.empty()}};
  const std::string cmd = serve_command(a, r);
  if (!cmd.empty())
    j["command"] = cmd;
  else
    j["prediction_only"] = r.not_runnable;
  return j;
}

void print_table(const ServePlanArgs& a, const char* title, const std::vector<plan::ServeRow>& rows,
                 const std::optional<plan::ServeRow>& best) {
  std::printf("# %s\n", title);
  std::printf("%-34s %6s %11s %14s %6s %12s %12s %12s %9s  %s\n", "layout", "batch", "latency_ms",
              "chip_s/token", "mfu", "weights/rank", "kv/rank", "peak/rank", "max_batch",
              "command");
  for (size_t i = 0; i < rows.size() && int(i) < a.top; ++i) {
    const plan::ServeRow& r = rows[i];
    const std::string cmd = serve_command(a, r);
    std::printf("%-34s %6lld %11.3f %14.4g %5.1f%% %10.1fMiB %10.1fMiB %10.1fMiB %9lld  %s\n",
                r.layout.describe().c_str(), (long long)r.batch, 1e3 * r.cost.latency_per_token,
                r.cost.chip_seconds_per_token, 100 * r.cost.mfu,
                r.cost.weight_bytes_per_rank / (1 << 20), r.cost.kv_bytes_per_rank / (1 << 20),
                r.cost.peak_bytes_per_rank / (1 << 20), (long long)r.cost.max_batch,
                cmd.empty() ? "(prediction only: tessel cannot run this layout)" : cmd.c_str());
  }
  if (best)
    std::printf("# best: %s batch %lld, %.3f ms, %.4g chip-s/token\n",
                best->layout.describe().c_str(), (long long)best->batch,
                1e3 * best->cost.latency_per_token, best->cost.chip_seconds_per_token);
}

}  // namespace

void add_plan_serve_options(CLI::App& plan, const std::shared_ptr<ServePlanArgs>& a) {
  plan.add_flag("--serve", a->enabled,
                "Serving plans (prefill and decode layouts, Pope et al. 2022) instead of training");
  plan.add_option("--latency-ms", a->latency_ms, "--serve: decode latency target per token (ms)");
  plan.add_option("--prefill-ms", a->prefill_ms, "--serve: prefill latency target per step (ms)");
  plan.add_option("--prompt", a->prompt, "--serve: prompt tokens per sequence")
      ->capture_default_str();
  plan.add_option("--gen", a->gen, "--serve: generated tokens per sequence")->capture_default_str();
  plan.add_option("--batch", a->batches, "--serve: batch sizes to try (default 1, 2, 4, ...)");
  plan.add_option("--weights", a->weights, "--serve: weight dtype")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}))
      ->capture_default_str();
  plan.add_option("--kv-dtype", a->kv_dtype,
                  "--serve: KV cache dtype (rows other than f32 are predictions only)")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}))
      ->capture_default_str();
  plan.add_option("--max-batch-tokens", a->max_batch_tokens,
                  "--serve: the engine's tokens per step (tessel serve --max-batch-tokens), for "
                  "its step's memory")
      ->capture_default_str();
  plan.add_option("--max-seqs", a->max_seqs,
                  "--serve: the engine's sequences at once (tessel serve --max-seqs; default: "
                  "each row's batch)");
}

void run_serve_plan(ServePlanArgs a) {
  TESSEL_CHECK(!a.model.empty() && !a.cluster.empty(), "plan --serve: give --model and --cluster");
  TESSEL_CHECK(a.prompt >= 1 && a.gen >= 1, "plan --serve: --prompt ", a.prompt, " and --gen ",
               a.gen, " must be >= 1");
  TESSEL_CHECK(a.max_batch_tokens >= 1 && a.max_seqs >= 0, "plan --serve: --max-batch-tokens ",
               a.max_batch_tokens, " must be >= 1 and --max-seqs ", a.max_seqs, " >= 0");
  const models::ConfigPtr config = train::resolve_model_config(a.model, "plan --serve --model");
  const plan::Cluster cluster = plan::Cluster::load(a.cluster);
  TESSEL_CHECK(a.prompt + a.gen <= config->max_positions(), "plan --serve: --prompt ", a.prompt,
               " + --gen ", a.gen, " exceeds the model's ", config->max_positions(), " positions");
  plan::ServeRequest req;
  req.shape = plan::serve_shape(*config);
  req.devices = a.devices > 0 ? a.devices : cluster.num_devices();
  req.batches = a.batches;
  req.decode_latency_target = a.latency_ms / 1e3;
  req.prefill_latency_target = a.prefill_ms / 1e3;
  req.workload.prompt = a.prompt;
  req.workload.context = a.prompt + a.gen / 2;  // the mean context over the generation
  req.workload.kv_capacity = a.prompt + a.gen;
  req.workload.weight_bytes = dtype_bytes(a.weights);
  req.workload.kv_bytes = dtype_bytes(a.kv_dtype);
  req.workload.act_bytes = a.weights == "f32" ? 4 : 2;
  req.workload.peak_dtype = a.weights == "f32" ? "f32" : "bf16";
  if (a.weights != "f32" && cluster.device.peak_flops[plan::peak_dtype_index("bf16")] <= 0)
    req.workload.peak_dtype = "f32";  // the CPU backend widens to f32
  req.config = config.get();
  req.tp_weights = tp_rank_weights;
  req.memory = traced_serve_memory(*config);
  // `tessel serve --kv-cache-dtype bf16` runs a 16-bit pool, but the engine's step is traced with
  // the model's own (the cast temporaries of a 16-bit pool are not), and int8 is not run at all.
  const std::string kv_dtype = a.kv_dtype;
  const std::string kv_refusal =
      "prediction only: the plan traces the engine's step with the "
      "model's own KV pool";
  req.tp_refusal = [config, kv_dtype, kv_refusal](int tp) -> std::string {
    if (kv_dtype != "f32") return kv_refusal;
    try {
      models::inference_tensor_parallel(*config, tp);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  };
  plan::ServePlans plans = plan::search_serve(cluster, req);
  if (a.kv_dtype != "f32")
    for (auto* rows : {&plans.prefill, &plans.decode})
      for (plan::ServeRow& r : *rows)
        if (r.not_runnable.empty()) r.not_runnable = kv_refusal;
  TESSEL_CHECK(!plans.decode.empty() && !plans.prefill.empty(), "plan --serve: ", req.shape.name,
               " does not fit on ", req.devices, " x ", cluster.device.kind, " (",
               cluster.device.memory_bytes, " bytes each) at any layout with one ",
               a.prompt + a.gen, "-token sequence");
  // An impossible target is one line naming what can be had.
  auto check_target = [](const char* what, double target_ms, const char* flag,
                         const std::optional<plan::ServeRow>& best,
                         const std::optional<plan::ServeRow>& fastest) {
    TESSEL_CHECK(target_ms <= 0 || best, "plan --serve: no layout meets ", flag, " ", target_ms,
                 " for ", what, "; the best achievable is ", 1e3 * fastest->cost.latency_per_token,
                 " ms (", fastest->layout.describe(), ", batch ", fastest->batch, ")");
  };
  check_target("decode", a.latency_ms, "--latency-ms", plans.best_decode, plans.fastest_decode);
  check_target("prefill", a.prefill_ms, "--prefill-ms", plans.best_prefill, plans.fastest_prefill);
  if (a.json) {
    nlohmann::json out{{"model", req.shape.name},
                       {"cluster", cluster.name},
                       {"devices", req.devices},
                       {"prompt", a.prompt},
                       {"gen", a.gen},
                       {"decode_context", req.workload.context},
                       {"weights", a.weights},
                       {"kv_dtype", a.kv_dtype},
                       {"max_batch_tokens", a.max_batch_tokens},
                       {"prefill", nlohmann::json::array()},
                       {"decode", nlohmann::json::array()}};
    const auto step = engine_step_memory(*config, a);
    const auto row = [&](const plan::ServeRow& r) {
      nlohmann::json j = row_json(a, r);
      if (const std::optional<int64_t> bytes = step(r)) j["engine_step_bytes_per_rank"] = *bytes;
      return j;
    };
    for (const auto& [key, rows] :
         {std::pair{"prefill", &plans.prefill}, std::pair{"decode", &plans.decode}})
      for (size_t i = 0; i < rows->size() && int(i) < a.top; ++i)
        out[key].push_back(row((*rows)[i]));
    if (plans.best_prefill) out["best_prefill"] = row(*plans.best_prefill);
    if (plans.best_decode) out["best_decode"] = row(*plans.best_decode);
    std::cout << out.dump(1) << std::endl;
    return;
  }
  std::printf(
      "# %s on up to %d x %s; prompt %lld, generate %lld (decode at context %lld); "
      "weights %s, KV %s\n",
      req.shape.name.c_str(), req.devices, cluster.device.kind.c_str(), (long long)a.prompt,
      (long long)a.gen, (long long)req.workload.context, a.weights.c_str(), a.kv_dtype.c_str());
  print_table(a, "prefill (latency: the whole prompt batch)", plans.prefill, plans.best_prefill);
  print_table(a, "decode (latency: one step = one token per sequence)", plans.decode,
              plans.best_decode);
}

}  // namespace tessel::cli
