// SPDX-License-Identifier: Apache-2.0
// The trainer: building the run (model, data, layout, optimizer, resume) and the loop over steps
// with its records, evaluations, checkpoints and stops. One step is trainer_step.cpp.
#include "tessel/train/trainer.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "tessel/autograd/engine.h"
#include "tessel/core/log.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/gemm_rate.h"
#include "tessel/models/family.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/moe.h"
#include "tessel/tensor/allocator.h"
#include "tessel/tensor/device_memory.h"
#include "tessel/train/checkpoint/checkpoint.h"
#include "tessel/train/checkpoint/safetensors_regions.h"
#include "tessel/train/global_batch.h"
#include "tessel/train/materialize.h"
#include "tessel/train/optim/grad_clip.h"
#include "tessel/train/stop_signal.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The tokenizer `data prepare` used, from the dataset's manifest (absent or moved: none).
std::string dataset_tokenizer_dir(const std::string& data_dir, int64_t* eot_id) {
  std::ifstream in(fs::path(data_dir) / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in, nullptr, false);
  if (manifest.is_discarded() || !manifest.contains("tokenizer")) return "";
  const auto& tok = manifest["tokenizer"];
  if (tok.contains("eot_id") && tok["eot_id"].is_number_integer()) {
    *eot_id = tok["eot_id"].get<int64_t>();
  }
  if (!tok.contains("path") || !tok["path"].is_string()) return "";
  fs::path path = tok["path"].get<std::string>();
  if (fs::is_regular_file(path)) path = path.parent_path();  // a tokenizer.json
  return fs::is_directory(path) ? path.string() : "";
}

}  // namespace

Trainer::Trainer(const TrainConfig& config, const std::string& resume, TrainerHooks hooks,
                 TrainLayout layout)
    : config_(config),
      hooks_(std::move(hooks)),
      layout_(std::move(layout)),
      dp_(layout_.dp),
      rng_(config.train.seed) {
  config_.validate();
  check_offload_settings(config_);
  if (config_.train.threads > 0) set_num_threads(config_.train.threads);
  build(resume);
}

Trainer::~Trainer() = default;

void Trainer::print(const std::string& line) const {
  if (!leader()) return;
  if (hooks_.print) {
    hooks_.print(line);
    return;
  }
  errno = 0;
  std::cout << line << std::endl;
  if (!std::cout.good()) {  // a full disk under a redirected stdout: stop as for the JSONL log
    if (write_failure_.empty())
      write_failure_ = std::string("train: cannot write the progress output (stdout): ") +
                       (errno != 0 ? std::strerror(errno) : "write failed");
    std::cout.clear();
  }
}

void Trainer::build(const std::string& resume) {
  const TrainSection& t = config_.train;
  // The global batch is what a checkpoint keeps (its train.toml); the accumulation follows.
  const GlobalBatch global = resolve_global_batch(t, dp_size());
  if (!global.note.empty()) print("note: " + global.note);
  config_.train.grad_accum = global.grad_accum;
  config_.train.global_batch = global.sequences;
  run_dir_ = config_.checkpoint.dir;
  lock_run_directory();  // first: one run per directory, and an unwritable one fails here
  int64_t resume_step = 0;
  if (!resume.empty()) resume_step = verify_checkpoint(resume);  // before any file is trusted
  if (resume.empty()) {
    const auto existing = list_checkpoints(run_dir_);
    TESSEL_CHECK(existing.empty(), "train: ", run_dir_, " already holds checkpoints (newest ",
                 existing.empty() ? "" : existing.back().path, "); continue it with --resume ",
                 run_dir_, " or set checkpoint.dir to a new directory");
  }

  // Data first: a missing dataset should fail before a large model is allocated.
  train_data_ =
      std::make_shared<io::TokenDataset>(io::TokenDataset::open(config_.data.dir, "train"));
  // A validation split the manifest declares must be readable: training on without it would
  // report no validation loss and leave the run unmeasured without a word.
  if (io::TokenDataset::declares_split(config_.data.dir, "val")) {
    try {
      val_data_ =
          std::make_shared<io::TokenDataset>(io::TokenDataset::open(config_.data.dir, "val"));
    } catch (const Error& e) {
      TESSEL_FAIL("train: the validation split that ", config_.data.dir,
                  "/manifest.json declares cannot be read: ", e.what(),
                  "; prepare the dataset again (tessel data prepare), or with --val-fraction 0 "
                  "to train without one");
    }
  } else {
    print("note: " + config_.data.dir + " has no validation split, evaluation disabled");
  }
  tokenizer_dir_ = dataset_tokenizer_dir(config_.data.dir, &eot_id_);
  if (!tokenizer_dir_.empty()) tokenizer_ = io::Tokenizer::load(tokenizer_dir_);

  // The model: from the checkpoint being resumed, from init_from, or freshly initialised.
  models::ConfigPtr config;
  std::string weights_from;
  if (!resume.empty()) {
    config = models::load_model_config((fs::path(resume) / "config.json").string());
    weights_from = resume;
    check_resume_arguments(resume, resume_step, *config);
  } else if (!config_.model.init_from.empty()) {
    config = resolve_model_config(config_.model.init_from, "model.init_from");
    weights_from = config_.model.init_from;
  } else {
    config = resolve_model_config(config_.model.config);
  }
  const models::ModelConfig& mc = *config;
  device_ = parse_device(config_.train.device);
  check_device_run(mc);      // before anything is allocated
  check_free_space_for(mc);  // before a large model is allocated
  const auto build_start = Clock::now();
  CheckpointMemory build_memory = checkpoint_memory_before();
  TESSEL_CHECK(t.seq_len <= mc.max_positions(), "train.seq_len = ", t.seq_len,
               " does not fit the model's context: max_positions = ", mc.max_positions());
  TESSEL_CHECK(train_data_->vocab_size() <= mc.vocabulary_size(),
               "train: the dataset's vocabulary (", train_data_->vocab_size(),
               " tokens) is larger than the model's vocab_size ", mc.vocabulary_size());
  RegionSource init;
  if (weights_from.empty()) {
    // Construction without materialisation: the recipes now, each rank's share of the values
    // once the axes have cut the model (build_strategies).
    nn::init::InitRecord record;
    {
      nn::init::DeferInit defer(record);
      model_ = mc.build_random(rng_);
    }
    init = init_region_source(
        std::make_shared<const ParameterInits>(parameter_inits(*model_, record)));
  } else {
    // Dropout draws from the trainer's generator, saved in checkpoints. Shape-only as well: each
    // rank materialises what it holds once the axes have cut the model.
    nn::init::InitRecord unused;
    nn::init::DeferInit defer(unused);
    model_ = mc.build_empty(&rng_);
    // A checkpoint in pieces: each rank reads its own parts later (load_checkpoint). A Hugging
    // Face directory or a whole-model checkpoint: each rank reads the byte ranges of what it
    // holds once the axes have cut the model, as from recipes (read, not mapped: nothing of the
    // file stays resident).
    if (weights_from != resume || !has_piece_index(resume)) {
      auto checkpoint = std::make_shared<const io::SafetensorsCheckpoint>(
          io::SafetensorsCheckpoint::open(weights_from, io::SafetensorsLoad::Read));
      init = safetensors_region_source(checkpoint, mc.family().hf_layout(*model_, *checkpoint));
    }
  }
  model_->train();
  // One mode for every block, or this pipeline rank's (train.recompute = "full,none");
  // rank_recompute refuses a list of neither one nor pp modes. An entry `full:3` gives the mode
  // to the rank's first three blocks only, once the pipeline has chosen them (`full:3+selective`:
  // the others selective).
  const nn::RankRecompute rank_rc =
      nn::rank_recompute(t.recompute, layout_.pp_rank(), layout_.pp_size());
  model_->set_recompute(rank_rc.blocks == nn::kAllBlocks ? rank_rc.mode : rank_rc.rest);
  // The layout's axes: tp splits the full weights in hand, pp chooses this rank's stages, dp and
  // ZeRO (and the optimizer below) see only those.
  build_strategies(init);
  if (rank_rc.blocks != nn::kAllBlocks)
    models::set_rank_recompute(
        *model_, rank_rc.mode, rank_rc.blocks,
        [&] {
          if (pipeline_) return pipeline_->rank_blocks();
          std::vector<int64_t> all(size_t(mc.num_layers()));
          for (size_t b = 0; b < all.size(); ++b) all[b] = int64_t(b);
          return all;
        }(),
        rank_rc.rest);
  build_memory.param_bytes = held_parameter_bytes();
  // Offloaded under dp, the shards are laid out in chunks with ZeRO's optimizer, which is
  // therefore built here, --build-only included: the build's record covers the shards' layout,
  // as a one-process offloaded run's covers its chunks (sealed while the model is built), so its
  // peak is the whole start-up's.
  const bool shards_offloaded = config_.memory.enabled() && data_ && data_->zero_stage() > 0;
  if (shards_offloaded) build_optimizer(init);
  built_ = checkpoint_record("build", seconds_since(build_start) * 1e3, build_memory);
  if (hooks_.build_only) {
    if (offload_) print(offload_->placement());  // the chunks are laid out: where each lives
    setup_sinks(-1);
    write_record(*built_);
    return;
  }

  io::LoaderOptions lo;
  lo.batch = t.micro_batch;
  lo.seq_len = t.seq_len;
  lo.seed = config_.data.seed;
  lo.rank = dp_ ? dp_->rank() : 0;  // each step takes dp * B windows; rank r reads rows r*B..
  lo.world = dp_size();
  loader_ = std::make_unique<io::TokenLoader>(train_data_, lo);
  // Dropout (and router jitter) draws positionally: this rank's rows are part lo.rank of the
  // global micro-batch, so every layout draws the one-process masks (docs/PARALLEL.md, "Dropout").
  for (const auto& [name, module] : model_->named_modules()) {
    if (auto* drop = dynamic_cast<nn::Dropout*>(module)) drop->set_positional(lo.rank, lo.world);
    if (auto* moe = dynamic_cast<nn::MoE*>(module)) moe->set_positional(lo.rank, lo.world);
  }
  TESSEL_CHECK(loader_->windows_per_epoch() >= t.micro_batch * dp_size(),
               "train: the training split of ", config_.data.dir, " holds ", train_data_->size(),
               " tokens: ", loader_->windows_per_epoch(),
               " windows of seq_len + 1 = ", t.seq_len + 1,
               ", fewer than train.micro_batch = ", t.micro_batch,
               dp_ ? " x dp = " + std::to_string(dp_size()) : std::string());

  if (!shards_offloaded) build_optimizer(init);
  const OptimSection& o = config_.optim;
  schedule_ = LrSchedule{o.lr, o.min_lr_ratio, o.warmup_steps, t.steps, parse_decay(o.decay)};
  // The whole model's count (this rank may hold a tensor-parallel piece of it).
  flops_per_token_ = mc.flops_per_token(t.seq_len);
  // Each rank's mode repeats its share of the blocks' work (the count is linear in the blocks):
  // its blocks, or the first N of them under `mode:N` and the others' under `mode:N+rest`.
  const std::vector<int64_t> blocks =
      pipeline_ ? pipeline_->blocks_per_rank() : std::vector<int64_t>{mc.num_layers()};
  // One mode on every block: the family's count itself (the shares need not sum back to it
  // bit for bit).
  recompute_flops_per_token_ = 0;
  const int pp = int(blocks.size());
  const nn::RankRecompute first = nn::rank_recompute(t.recompute, 0, pp);
  if (nn::parse_recompute_list(t.recompute).size() == 1 && first.blocks == nn::kAllBlocks)
    recompute_flops_per_token_ = mc.recompute_flops_per_token(first.mode, t.seq_len);
  else
    for (size_t r = 0; r < blocks.size(); ++r) {
      const nn::RankRecompute rc = nn::rank_recompute(t.recompute, int(r), pp);
      const double n = double(rc.blocks == nn::kAllBlocks ? blocks[r] : rc.blocks);
      recompute_flops_per_token_ +=
          (mc.recompute_flops_per_token(rc.mode, t.seq_len) * n +
           mc.recompute_flops_per_token(rc.rest, t.seq_len) * (double(blocks[r]) - n)) /
          double(mc.num_layers());
    }

  if (!resume.empty()) load_checkpoint(resume);
  move_to_run_device();  // train.device: after the values are in place on the host
  setup_sinks(resume.empty() ? -1 : step_);
  if (built_) write_record(*built_);
  if (loaded_) write_record(*loaded_);
}

// The optimizer over what this rank holds: ZeRO's over its shards (their chunks laid out when
// offloaded), the offloaded AdamW over the chunks, or the plain AdamW.
void Trainer::build_optimizer(const RegionSource& init) {
  const OptimSection& o = config_.optim;
  if (data_ && data_->zero_stage() > 0) {
    parallel::ZeroOptions zo;
    zo.stage = data_->zero_stage();
    zo.beta1 = o.beta1;
    zo.beta2 = o.beta2;
    zo.eps = o.eps;
    zo.weight_decay = o.weight_decay;
    // Offloaded: the moments' shards start as zeros in their chunks (build_offload_shards).
    zo.allocate_moments = !config_.memory.enabled();
    auto sharded = std::make_unique<ShardedAdamW>(data_->ddp(), zo, data_->zero3());
    zero_ = &sharded->zero();
    sharded_ = sharded.get();
    optimizer_ = std::move(sharded);
    if (expert_ && expert_->zero_buckets()) {
      // The experts' blocks over their own group, next to the dense blocks over dp.
      auto experts = std::make_unique<ShardedAdamW>(*expert_->zero_buckets(), zo, expert_->zero3());
      expert_zero_ = &experts->zero();
      expert_sharded_ = experts.get();
      std::vector<std::unique_ptr<Optimizer>> members;
      members.push_back(std::move(optimizer_));
      members.push_back(std::move(experts));
      optimizer_ = std::make_unique<OptimizerGroup>(std::move(members));
    }
    // Offloaded: both optimizers' shards (the experts' after the dense ones) in one chunk layout.
    if (config_.memory.enabled()) build_offload_shards(init);
  } else if (offload_) {
    auto adamw =
        std::make_unique<OffloadAdamW>(offload_->chunks(), offload_->parameters(),
                                       AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
    offload_adamw_ = adamw.get();
    offload_->set_optimizer(adamw.get());
    optimizer_ = std::move(adamw);
  } else {
    auto adamw = std::make_unique<AdamW>(trainable_parameters(),
                                         AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
    adamw_ = adamw.get();
    optimizer_ = std::move(adamw);
  }
}

void Trainer::setup_sinks(int64_t resume_step) {
  if (!leader()) return;
  const TrainSection& t = config_.train;
  if (!config_.log.jsonl.empty()) {
    sinks_.add(std::make_unique<JsonlSink>(
        JsonlLog((fs::path(run_dir_) / config_.log.jsonl).string(), resume_step)));
  }
  if (config_.log.tensorboard) {
    const std::string dir = (fs::path(run_dir_) / kTensorBoardDir).string();
    sinks_.add(std::make_unique<TensorBoardSink>(dir, resume_step));
  }
  sinks_.add(std::make_unique<ProgressSink>(config_.log.interval,
                                            t.micro_batch * t.seq_len * t.grad_accum * dp_size(),
                                            [this](const std::string& line) { print(line); }));
}

double Trainer::dp_mean(double value) const {
  if (!dp_) return value;
  Tensor t = full({1}, value, DType::F64);
  dp_->all_reduce(t, dist::ReduceOp::Avg);
  return t.data<double>()[0];
}

TrainSummary Trainer::run() {
  const TrainSection& t = config_.train;
  TrainSummary sum;
  if (hooks_.build_only) return sum;
  const auto t0 = Clock::now();
  sum.first_step = step_ + 1;
  if (config_.machine.peak_gflops <= 0 && !device_.is_cpu()) {
    // The host's GEMM says nothing of a GPU's: MFU needs the device's peak from the user.
    print("machine: MFU n/a on " + device_.str() +
          " until machine.peak_gflops gives the device's dense peak (an H100 / H200: 989000 in "
          "bf16)");
  } else if (config_.machine.peak_gflops <= 0) {
    // A quarter second is a median of tens of 1024-cubed products here (a few on a slow core):
    // enough for MFU's denominator, and a short run's start-up is not spent measuring.
    config_.machine.peak_gflops = kernels::gemm_gflops(1024, 1024, 1024, false, false, 0.25);
    print("machine: measured f32 GEMM peak " + std::to_string(int(config_.machine.peak_gflops)) +
          " GFLOP/s (MFU is a fraction of it; set machine.peak_gflops to fix it)");
  }
  const models::ModelConfig& mc = model_->model_config();
  print("model: " + mc.summary() + ", " + std::to_string(mc.parameter_count()) + " parameters; " +
        std::to_string(int64_t(flops_per_token_ / 1e6)) + " MFLOP per token");
  print("data: " + std::to_string(train_data_->size()) + " train tokens (" +
        std::to_string(loader_->windows_per_epoch()) + " windows of " +
        std::to_string(t.seq_len + 1) + "), " + std::to_string(val_data_ ? val_data_->size() : 0) +
        " val tokens; " + std::to_string(t.micro_batch * t.seq_len * t.grad_accum * dp_size()) +
        " tokens per step; " + std::to_string(num_threads()) + " threads" +
        (layout_.world_size() > 1
             ? " x " + std::to_string(layout_.world_size()) + " ranks (" + layout_.str() + ")"
             : std::string()));
  {
    const parallel::MemoryReport m = memory_report();
    print("memory per rank: parameters " + format_bytes(double(m.param_bytes)) + ", gradients " +
          format_bytes(double(m.grad_bytes)) + ", optimizer " +
          format_bytes(double(m.optimizer_bytes)) + ", buffers " +
          format_bytes(double(m.comm_bytes)) + "; ZeRO-" + std::to_string(m.stage) +
          " formula at dp " + std::to_string(m.dp) + ": " +
          format_bytes(double(m.expected_total())) + " (" + (m.stage == 3 ? "4/dp" : "4") + " + " +
          (m.stage >= 2 ? "4/dp" : "4") + " + " + (m.stage >= 1 ? "8/dp" : "8") +
          " bytes per parameter)");
  }
  if (offload_) print(offload_->placement());
  if (step_ > 0)
    print("resumed at step " + std::to_string(step_) + " of " + std::to_string(t.steps));

  install_stop_handlers();
  struct Uninstall {
    ~Uninstall() { remove_stop_handlers(); }
  } uninstall;
  double run_ms = 0;
  int64_t run_steps = 0;
  int64_t saved_at = -1;
  bool warned_peak = false;
  StopRequest stop;
  while (step_ < t.steps) {
    stop = stop_agreed();
    if (stop.any()) {
      sum.interrupted = true;
      break;
    }
    StepRecord r;
    train_step(r);
    run_ms += r.step_ms;
    ++run_steps;
    r.elapsed_s = seconds_since(t0);
    r.eta_s = run_ms / double(run_steps) / 1e3 * double(t.steps - step_);
    sum.last_loss = r.loss;
    if (r.mfu > 1.0 && !warned_peak) {
      warned_peak = true;  // a peak measured while something else held the cores
      print("warning: MFU above 100%: the peak of " +
            std::to_string(int(config_.machine.peak_gflops)) +
            " GFLOP/s measured at start is too low (was the machine busy?); set "
            "machine.peak_gflops (tessel bench peak measures it)");
    }
    write_record(r);  // JSONL, TensorBoard, the progress line (metric_sinks.h)
    if (hooks_.on_step) hooks_.on_step(r);
    if (val_data_ && config_.eval.interval > 0 && step_ % config_.eval.interval == 0 &&
        step_ < t.steps) {
      const EvalRecord e = evaluate();
      write_record(e);
      if (hooks_.on_eval) hooks_.on_eval(e);
    }
    if (config_.checkpoint.interval > 0 && step_ % config_.checkpoint.interval == 0 &&
        step_ < t.steps) {
      sum.last_checkpoint = save_checkpoint();
      saved_at = step_;
    }
  }
  if (!sum.interrupted && pipeline_) pipeline_->report(run_dir_, step_);
  sum.last_step = step_;
  sum.skipped_steps = skipped_;
  if (sum.interrupted) {
    if (saved_at != step_) sum.last_checkpoint = save_checkpoint();
    sum.stop_signal = stop.signal;
    sum.seconds = seconds_since(t0);
    if (stop.write_failed) {
      sum.error = stopped_by_failure(sum.last_checkpoint);
      return sum;
    }
    print("stopped by signal " + std::to_string(stop.signal) +
          (stop.signal == SIGTERM || stop.signal == SIGINT || stop.signal == SIGUSR1
               ? " (" + signal_name(stop.signal) + ")"
               : std::string()) +
          " after step " + std::to_string(step_) + "; checkpoint " + sum.last_checkpoint +
          "; continue with: tessel train --resume " + run_dir_);
    return sum;
  }
  if (val_data_ && run_steps > 0) {
    const EvalRecord e = evaluate();
    write_record(e);
    if (hooks_.on_eval) hooks_.on_eval(e);
  }
  sum.val_loss = last_val_loss_;
  if (run_steps > 0 || list_checkpoints(run_dir_).empty()) {
    sum.last_checkpoint = save_checkpoint();
  }
  if (!sum.last_checkpoint.empty()) print("checkpoint: " + sum.last_checkpoint);
  // The last records' writes: agreed like a stop, since only rank 0 knows.
  if (stop_agreed().write_failed) {
    sum.error = stopped_by_failure(sum.last_checkpoint);
    sum.seconds = seconds_since(t0);
    return sum;
  }
  // Pipeline stages: rank 0 samples with every stage's current parameters (checkpoints no longer
  // bring them: each stage writes its own pieces).
  if (config_.sample.tokens > 0 && pipeline_) pipeline_->sync_model();
  // ZeRO-3: rank 0 samples alone (or its ep group), so every rank gathers the whole model for it
  // first (under --ep its experts too).
  const auto gathered = config_.sample.tokens > 0 ? gather_all_zero3() : nullptr;
  // Under tensor parallelism rank 0's whole tp group samples together (the model is split), and
  // under expert parallelism its ep group (consecutive dp ranks).
  if (config_.sample.tokens > 0 && offload_) {
    print("note: no sample generated: decoding from chunks is not built yet");
  } else if (config_.sample.tokens > 0 && (leader() || (tensor_ && layout_.dp_rank() == 0) ||
                                           (expert_ && layout_.dp_rank() < layout_.ep_size()))) {
    sum.sample = generate_sample();
    char what[96];
    std::snprintf(what, sizeof what, "sample (%lld tokens, temperature %g, top_k %lld):",
                  (long long)config_.sample.tokens, config_.sample.temperature,
                  (long long)config_.sample.top_k);
    print(what + ("\n" + sum.sample));
  }
  sum.seconds = seconds_since(t0);
  return sum;
}

}  // namespace tessel::train
