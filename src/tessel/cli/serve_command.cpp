// SPDX-License-Identifier: Apache-2.0
// `tessel serve`: a model behind the OpenAI-compatible HTTP API (docs/SERVING.md). The listener
// opens first, so that /health answers 503 while the weights load; then the engine starts, the
// server turns ready and prints one line with its address. SIGTERM or SIGINT: new requests are
// refused (503), running ones get --drain-timeout seconds to finish, the rest are cancelled, and
// the program exits 0. The signal handler only writes the signal's number to a pipe that the main
// thread reads (the self-pipe trick): threads that existed before the command ran (OpenMP's,
// started by the CPU probe) may receive the signal, and a mask set here could not cover them.
// With --tp N under `mpirun -np N` (docs/SERVING.md "Distributed serving") every rank holds its
// share of the model (train/model_tensor_parallel.h); rank 0 serves HTTP and runs the engine,
// the others run each step it sends them and exit 0 when its drain ends (a mixture of experts
// with each expert's FFN columns split over tp). --ep N does the same with a mixture-of-experts
// model's experts spread over the ranks, and with --tp T, --pp P or both as well on N·T, N·P or
// N·T·P ranks (cli/ep_model.h, cli/ep_pp_model.h). With --pp N each
// rank holds one pipeline stage (cli/pp_model.h) under the same scheme: rank 0 decides and
// broadcasts every step, the stages pass hidden states on in --pp-microbatches pieces, and the last
// one sends the logits back to rank 0, which keeps one step of each of --pp-groups groups of
// requests in flight (serve/step_groups.h).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "tessel/cli/commands.h"
#include "tessel/cli/device_option.h"
#include "tessel/cli/ep_model.h"
#include "tessel/cli/ep_pp_model.h"
#include "tessel/cli/job_refusal.h"
#include "tessel/cli/model_args.h"
#include "tessel/cli/pp_model.h"
#include "tessel/cli/tp_model.h"
#include "tessel/core/log.h"
#include "tessel/core/threads.h"
#include "tessel/dist/world.h"
#include "tessel/io/gguf.h"
#include "tessel/models/gguf_model.h"
#include "tessel/serve/chat_template.h"
#include "tessel/serve/engine.h"
#include "tessel/serve/engine_follower.h"
#include "tessel/serve/http_server.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::cli {

namespace {

int g_stop_pipe[2] = {-1, -1};

void on_stop_signal(int signal_number) {
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] const ssize_t n = write(g_stop_pipe[1], &byte, 1);  // async-signal-safe
}

// SIGTERM/SIGINT go to the pipe from whichever thread receives them.
void install_stop_handler() {
  TESSEL_CHECK(pipe(g_stop_pipe) == 0, "serve: cannot create the signal pipe");
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

// Blocks until a stop signal arrives; its number.
int wait_stop_signal() {
  unsigned char byte = 0;
  while (read(g_stop_pipe[0], &byte, 1) != 1) {
  }
  return int(byte);
}

struct ServeArgs {
  std::string model, host = "127.0.0.1", served_model_name, api_key, weights = "stored";
  int port = 8000;
  serve::EngineOptions engine;
  bool no_prefix_caching = false;
  double drain_timeout = 30;
  double stall_timeout = 60;
  int64_t max_body_bytes = int64_t(16) << 20;
  int http_threads = 256;
  int threads = 0;
  int tp = 1;
  int ep = 1;
  int pp = 1;
  int pp_microbatches = 1;
  int pp_groups = 0;  // 0: --pp's stage count
};

// The engine's groups of requests with a step each in flight: one per stage unless --pp-groups
// says otherwise (fewer leave stages idle, more only shrink each group's step), 1 without --pp.
int64_t step_groups(const ServeArgs& args) {
  TESSEL_CHECK(args.pp_groups >= 0, "serve: --pp-groups ", args.pp_groups, " must be >= 1");
  TESSEL_CHECK(args.pp > 1 || args.pp_groups <= 1, "serve: --pp-groups ", args.pp_groups,
               " needs --pp N with N > 1 (groups overlap the pipeline's stages)");
  if (args.pp == 1) return 1;
  return args.pp_groups == 0 ? args.pp : args.pp_groups;
}

// The model of this rank: the whole of it, or under --tp its share, with the step mirror that
// ties the ranks' engines together.
struct RankModel {
  std::shared_ptr<models::CausalLM> model;
  std::shared_ptr<serve::StepMirror> mirror;
  std::shared_ptr<train::ModelTensorParallel> tp;
};

RankModel load_rank_model(const ServeArgs& args, models::InferenceWeights weights,
                          const dist::CommPtr& world) {
  RankModel out;
  if (!world) {
    out.model = models::load_model_source(args.model);
    apply_inference_weights(*out.model, weights, "serve");
    return out;
  }
  if (args.pp > 1) {
    const int microbatches = args.pp_microbatches;
    const auto note = [&](const std::string& line) {
      if (world->rank() == 0) log(LogLevel::Info, "serve: ", line);
    };
    PpRankModel loaded =
        args.ep > 1
            ? load_ep_pp_rank_model(args.model, weights, world, args.ep, args.tp, microbatches,
                                    serve::PipelineStageModel::LogitsTo::kFirstRank, note)
            : load_pp_rank_model(args.model, weights, world, args.tp, microbatches,
                                 serve::PipelineStageModel::LogitsTo::kFirstRank, note);
    log(LogLevel::Info, "serve: pipeline rank ", world->rank(), " runs blocks [",
        loaded.model->first_block(), ", ", loaded.model->last_block(), ") and ", loaded.share);
    if (world->rank() == 0)
      log(LogLevel::Info, "serve: ", args.pp, " pipeline stages of ",
          args.ep > 1 ? args.ep * args.tp : args.tp,
          args.ep > 1 ? (args.tp > 1 ? " expert- and tensor-parallel" : " expert-parallel")
                      : " tensor-parallel",
          " ranks, up to ", microbatches, " micro-batches per step, ", step_groups(args),
          " groups of requests in flight");
    out.model = std::move(loaded.model);
    // The logits arrive on rank 0 inside the stage's forward: nothing to gather.
    out.mirror = std::make_shared<serve::StepMirror>(world, [](const Tensor& t) { return t; });
    return out;
  }
  const bool leader = world->rank() == 0;
  const auto note = [&](const std::string& line) {
    if (leader) log(LogLevel::Info, "serve: ", line);
  };
  if (args.ep > 1) {
    EpRankModel loaded = load_ep_rank_model(args.model, weights, world, args.tp, note);
    log(LogLevel::Info, "serve: expert-parallel rank ", world->rank(), " ", loaded.share,
        args.tp > 1 ? " (its tp share of the dense part and of its experts)"
                    : " (the dense part and its experts)");
    out.mirror = expert_parallel_step_mirror(world, loaded);
    out.model = std::move(loaded.model);
    out.tp = std::move(loaded.tp);
    return out;
  }
  TpRankModel loaded = load_tp_rank_model(args.model, weights, world, "serve", note);
  log(LogLevel::Info, "serve: tensor-parallel rank ", world->rank(), " ", loaded.share);
  out.model = std::move(loaded.model);
  out.tp = std::move(loaded.tp);
  out.mirror = std::make_shared<serve::StepMirror>(world, [tp = out.tp](const Tensor& local) {
    return train::model_tp_full_logits(*tp, local);
  });
  return out;
}

// --tp and --pp: the job's size and the model's shape are checked before any weight is read. A
// model the plan cannot split (or --pp cannot take) fails identically on every rank; only rank 0
// reports it (the others wait to be ended by its abort), so the job prints one error.
dist::CommPtr start_tensor_parallel(const ServeArgs& args) {
  TESSEL_CHECK(args.tp >= 1 && args.pp >= 1, "serve: --tp ", args.tp, " and --pp ", args.pp,
               " must be >= 1");
  const int ranks = args.tp * args.pp;
  const std::string flag = args.pp > 1 ? "--pp" : "--tp";
  const dist::LaunchInfo launch = dist::detect_launch();
  TESSEL_CHECK(launch.size == ranks, "serve: ", flag, " ", ranks, " ranks, but the job has ",
               launch.size, " (", launch.describe(), "); start it with mpirun -np ", ranks,
               " tessel serve ", flag, " ", ranks);
  if (ranks == 1) {
    check_pp_request(args.model, args.tp, args.pp, args.pp_microbatches, "serve");
    return nullptr;
  }
  dist::CommPtr world = dist::init_world();
  check_on_every_rank(world, [&] {
    check_pp_request(args.model, args.tp, args.pp, args.pp_microbatches, "serve");
    if (args.pp == 1)
      (void)models::inference_tensor_parallel(*models::load_model_source_config(args.model),
                                              args.tp);
  });
  return world;
}

// A rank other than 0: its share of every step until rank 0 stops. Signals are rank 0's to act
// on (mpirun forwards SIGINT to every rank): this rank leaves when rank 0's drain ends.
void run_follower(const ServeArgs& args, models::InferenceWeights weights,
                  const dist::CommPtr& world) {
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  serve::EngineOptions engine_options = args.engine;
  engine_options.prefix_caching = !args.no_prefix_caching;
  RankModel rank = load_rank_model(args, weights, world);
  serve::EngineFollower follower(rank.model, engine_options, rank.mirror);
  const int64_t steps = follower.run();
  const auto stage = std::dynamic_pointer_cast<serve::PipelineStageModel>(rank.model);
  const char* kind = stage ? "pipeline" : args.ep > 1 ? "expert-parallel" : "tensor-parallel";
  log(LogLevel::Info, "serve: ", kind, " rank ", world->rank(), " stopped after ", steps, " steps",
      stage ? detail::concat(" (", stage->microbatches_run(), " micro-batches)") : std::string());
}

io::Tokenizer load_tokenizer(const std::string& model) {
  TESSEL_CHECK(has_tokenizer_files(model), "serve: ", model,
               " has no tokenizer (tokenizer.json, tokenizer.model, vocab.json + merges.txt, or "
               "a GGUF with tokenizer.ggml.* keys); the server needs one to read prompts");
  if (models::is_gguf_model(model))
    return io::Tokenizer::from_gguf(io::GgufFile::open(model, io::GgufMapping::Windows).metadata(),
                                    model);
  return io::Tokenizer::load(model);
}

// The name a model is served under by default: its directory's or file's name.
std::string default_model_name(const std::string& model) {
  std::filesystem::path p(model);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return models::is_gguf_model(model) ? p.stem().string() : p.filename().string();
}

void run_serve(const ServeArgs& args) {
  poll_between_regions_by_default();
  TESSEL_CHECK(args.port >= 0 && args.port <= 65535, "serve: --port ", args.port,
               " must be in [0, 65535]");
  TESSEL_CHECK(args.drain_timeout >= 0, "serve: --drain-timeout ", args.drain_timeout,
               " must be >= 0");
  TESSEL_CHECK(args.stall_timeout > 0, "serve: --stall-timeout ", args.stall_timeout,
               " must be > 0");
  TESSEL_CHECK(args.max_body_bytes > 0, "serve: --max-body-bytes must be > 0");
  TESSEL_CHECK(args.http_threads >= 1, "serve: --http-threads must be >= 1");
  TESSEL_CHECK(args.engine.max_n >= 1, "serve: --max-n must be >= 1");
  check_model_dir(args.model, "serve");
  const models::InferenceWeights weights = models::parse_inference_weights(args.weights);
  apply_threads(args.threads);
  (void)step_groups(args);  // refused before any rank starts
  const dist::CommPtr world = args.ep > 1
                                  ? start_expert_parallel(args.model, args.ep, args.tp, "serve",
                                                          args.pp, args.pp_microbatches)
                                  : start_tensor_parallel(args);
  if (world && world->rank() != 0) return run_follower(args, weights, world);

  // SIGINT/SIGTERM start the drain below; a client that closes its socket mid-write must not
  // kill the process.
  install_stop_handler();
  signal(SIGPIPE, SIG_IGN);

  serve::ServerOptions options;
  options.host = args.host;
  options.port = args.port;
  const std::string own_name = default_model_name(args.model);
  options.served_model_name = args.served_model_name.empty() ? own_name : args.served_model_name;
  options.model_aliases = {own_name, args.model};
  options.api_key = args.api_key;
  options.max_body_bytes = size_t(args.max_body_bytes);
  options.limits.max_n = args.engine.max_n;
  options.http_threads = args.http_threads;
  options.engine_stall_timeout = std::chrono::milliseconds(int64_t(args.stall_timeout * 1000));
  const serve::ChatTemplate chat = serve::ChatTemplate::for_model(args.model);
  options.render_chat = [chat](const std::vector<serve::ChatMessage>& messages,
                               bool generation_prompt) {
    return chat.render(messages, generation_prompt);
  };
  serve::HttpServer server(options);
  const int port = server.bind();
  server.start();
  log(LogLevel::Info, "serve: listening on http://", args.host, ":", port, ", loading ", args.model,
      " (chat template: ", chat.origin(), ")");

  serve::EngineOptions engine_options = args.engine;
  engine_options.prefix_caching = !args.no_prefix_caching;
  engine_options.step_groups = step_groups(args);
  RankModel rank = load_rank_model(args, weights, world);
  serve::Engine engine(std::move(rank.model), load_tokenizer(args.model), engine_options,
                       rank.mirror);
  engine.start();
  server.attach(engine);
  server.set_ready(true);
  std::printf("tessel serve: ready at http://%s:%d (model '%s', context %lld tokens)\n",
              args.host.c_str(), port, options.served_model_name.c_str(),
              static_cast<long long>(engine.context_length()));
  std::fflush(stdout);

  const int signal_number = wait_stop_signal();
  log(LogLevel::Info, "serve: ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
      ": draining (up to ", args.drain_timeout, " s)");
  server.begin_drain();
  engine.drain(std::chrono::milliseconds(int64_t(args.drain_timeout * 1000)));
  server.stop();  // the running responses have their last deltas: their threads finish
  log(LogLevel::Info, "serve: stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API (docs/SERVING.md)");
  add_device_option(*cmd);
  cmd->add_option("-m,--model", args->model,
                  "Model directory (config.json + weights + tokenizer) or a .gguf file")
      ->required();
  cmd->add_option("--weights", args->weights, kWeightsHelp)->capture_default_str();
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--served-model-name", args->served_model_name,
                  "The model's id in the API (default: the directory's or file's name)");
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (health and metrics stay open)");
  cmd->add_option("--max-batch-tokens", args->engine.max_batch_tokens,
                  "Tokens per engine step (decode tokens + prompt chunks)")
      ->capture_default_str();
  cmd->add_option("--max-seqs", args->engine.max_seqs, "Sequences running at once")
      ->capture_default_str();
  cmd->add_option("--kv-cache-bytes", args->engine.kv_cache_bytes,
                  "KV-cache pool in bytes (0: a fraction of the free memory)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-dtype", args->engine.kv_cache_dtype,
                  "KV-cache element type: auto (the model's), f32, bf16 or f16; 16 bits halve "
                  "what attention reads, rounding the keys and values")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "f16"}))
      ->capture_default_str();
  cmd->add_option("--block-size", args->engine.block_size, "Tokens per KV-cache block")
      ->capture_default_str();
  cmd->add_option("--max-model-len", args->engine.max_model_len,
                  "Longest prompt + output in tokens (0: the model's max_positions); the KV pool "
                  "must hold one such sequence")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-caching", args->no_prefix_caching,
                "Do not share the KV blocks of common prompt prefixes between requests");
  cmd->add_flag("--deterministic", args->engine.deterministic,
                "Batch-invariant kernels: a request's tokens and logprobs do not depend on what "
                "else is in the batch (docs/SERVING.md gives the cost)");
  cmd->add_option("--max-queue", args->engine.max_queue,
                  "Waiting requests before new ones are refused with 429")
      ->capture_default_str();
  cmd->add_option("--max-n", args->engine.max_n, "Most choices (n) per request")
      ->capture_default_str();
  cmd->add_option("--drain-timeout", args->drain_timeout,
                  "Seconds running requests get to finish after SIGTERM/SIGINT")
      ->capture_default_str();
  cmd->add_option("--stall-timeout", args->stall_timeout,
                  "Seconds one engine step may take before /health answers 503 (hung engine)")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", args->max_body_bytes, "Largest request body (larger: 413)")
      ->capture_default_str();
  cmd->add_option("--http-threads", args->http_threads,
                  "Connections served at once (each streaming response holds one)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", args->threads,
                  "Compute threads (0: TESSEL_NUM_THREADS or all cores)")
      ->capture_default_str();
  cmd->add_option("--tp", args->tp,
                  "Tensor-parallel ranks: run under mpirun -np N with --tp N; rank 0 serves HTTP "
                  "(same tokens as one rank)")
      ->capture_default_str();
  cmd->add_option(
         "--ep", args->ep,
         "Expert-parallel ranks of a mixture-of-experts model: run under mpirun -np N "
         "with --ep N (-np N*T with --tp T or --pp T as well); rank 0 serves HTTP (same tokens as "
         "one rank)")
      ->capture_default_str();
  cmd->add_option("--pp", args->pp,
                  "Pipeline stages: run under mpirun -np N with --pp N, each rank holding its "
                  "stage's blocks and KV cache; rank 0 serves HTTP (same tokens as one rank)")
      ->capture_default_str();
  cmd->add_option(
         "--pp-microbatches", args->pp_microbatches,
         "Pieces of whole sequences each step is cut into so that the stages overlap (pays "
         "off for long prompt chunks; a decode step's pieces each re-read the weights)")
      ->capture_default_str();
  cmd->add_option("--pp-groups", args->pp_groups,
                  "Groups of requests with one step each in flight across the --pp stages, so "
                  "that stage r computes one group's step while stage r + 1 computes another's "
                  "(default: the stage count; 1 runs each step through all stages in turn)");
  cmd->callback([args] { run_serve(*args); });
}

}  // namespace tessel::cli
