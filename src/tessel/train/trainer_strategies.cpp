// SPDX-License-Identifier: Apache-2.0
// The trainer's layout as a list of axes (strategy/axis_strategy.h). Each axis is built when the
// run has it, after the model and in dependency order: tensor parallelism splits the full model;
// pipeline stages then choose their parameters; data parallelism and ZeRO take the stage's
// (sharded) parameters as plain local tensors; mixed precision covers the modules the stages run.
// The list is in the order of the gradient synchronisation: data parallelism's overlapped
// averages complete before tensor parallelism sums the replicated parameters' copies, except
// under ZeRO-2/3, which keep only shards of the averages, so tp's sums must come first.
#include <algorithm>
#include <filesystem>
#include <set>

#include "tessel/nn/moe.h"
#include "tessel/train/pipeline_stage.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

void Trainer::build_strategies(const RegionSource& init) {
  const TrainSection& t = config_.train;
  const ParallelSection& par = config_.parallel;
  const auto printer = [this](const std::string& line) { print(line); };
  // The model is shape-only (its parameters have no storage bytes yet, built from recipes or
  // empty for a checkpoint): no axis copies values; the tensor-parallel pieces are shape-only as
  // well, and every rank allocates and fills what it holds once all the axes have cut it
  // (materialize_held_parameters, fill_parameters here or when a checkpoint is loaded).
  if (layout_.tp) {
    tensor_ = std::make_unique<TensorParallelStrategy>(
        *model_, layout_.tp, par.tp_plan, par.sequence_parallel,
        [this](const std::string& line) { print("note: " + line); }, /*copy_values=*/false,
        par.expert_tensor_parallel);
    const int64_t heads = model_->model_config().num_heads();
    print("tensor parallel: tp = " + std::to_string(layout_.tp_size()) +
          (tensor_->model_tp().sequence_parallel ? " with sequence parallelism" : "") + ", " +
          std::to_string(tensor_->model_tp().result.applied.size()) + " modules parallelized, " +
          std::to_string(heads / layout_.tp_size()) + " of " + std::to_string(heads) +
          " heads per rank");
    if (tensor_->expert_layers() > 0)
      print("expert tensor parallel: each expert's FFN of " +
            std::to_string(tensor_->expert_layers()) + " MoE layers split over tp = " +
            std::to_string(layout_.tp_size()) + " (gate/up column-, down row-parallel)");
  } else {
    if (par.sequence_parallel)
      print("note: parallel.sequence_parallel has no effect without --tp > 1");
    if (par.expert_tensor_parallel)
      print("note: parallel.expert_tensor_parallel has no effect without --tp > 1");
  }
  const DType dtype = compute_dtype_of(t.precision);
  if (layout_.pp_size() > 1) {
    PipelineSetup ps;
    ps.schedule = par.schedule;
    ps.split = par.pipeline_split;
    ps.micro_batches = t.grad_accum;
    ps.micro_batch = t.micro_batch;
    ps.seq_len = t.seq_len;
    ps.dtype = dtype;
    ps.tp = tensor_.get();
    ps.print = printer;
    ps.begin_micro_batch = [this](int64_t m) { begin_micro_batch(m); };
    pipeline_ = std::make_unique<PipelineStrategy>(*model_, layout_, std::move(ps));
  } else if (!par.pipeline_split.empty()) {
    print("note: parallel.pipeline_split has no effect without --pp > 1");
  }
  if (layout_.ep) {
    // Composed with dp, ZeRO 1-3, pp and tp (docs/MOE.md, "Expert parallelism"). After the
    // pipeline axis: the stages are cut from the whole experts' costs, as without --ep, and each
    // rank reduces only its stages' experts. Under tp the ep groups are split from each tp
    // rank's dp group (make_layout), so a group's ranks share a tp rank and see the same tokens
    // as their tp peers; the experts are whole on every tp rank (the plan leaves them alone) or,
    // under --etp, split by columns, and either way each tp rank sends its piece of the rows.
    TESSEL_CHECK(model_->model_config().has_experts(), "train: --ep ", layout_.ep_size(),
                 " needs a mixture-of-experts model; ", model_->model_config().summary(),
                 " has no experts");
    std::set<std::string> trained;
    if (pipeline_)
      for (const auto& [name, param] : pipeline_->trainable_parameters()) trained.insert(name);
    // The experts' reductions overlap the last backward as the dense ones do, unless a sum over
    // tp (sequence parallelism, replicated pieces) must reach their gradients first.
    const bool overlap = par.overlap && !(tensor_ && tensor_->sums_gradients());
    expert_ = std::make_unique<ExpertParallelStrategy>(
        *model_, layout_.ep, layout_.ep_dp, layout_.dp_size(), int(par.zero_stage),
        par.bucket_mb << 20, trained, config_.memory.enabled(), overlap);
    if (pipeline_) expert_->set_pipeline(layout_.pp);
    if (tensor_) expert_->set_tensor_parallel(layout_.tp, tensor_->model_tp());
    print("expert parallel: ep = " + std::to_string(layout_.ep_size()) + ", " +
          std::to_string(expert_->layers()) + " MoE layers, each rank holds 1/" +
          std::to_string(layout_.ep_size()) + " of every layer's experts" +
          (par.zero_stage > 0 ? "; their ZeRO-" + std::to_string(par.zero_stage) + " blocks over " +
                                    std::to_string(layout_.dp_size() / layout_.ep_size()) +
                                    " rank(s) holding the same experts"
                              : std::string()));
  }
  if (model_->model_config().has_experts()) print(expert_bytes_line());
  const int stage = int(par.zero_stage);
  if (dp_) {
    DataParallelSetup ds;
    ds.options.bucket_bytes = par.bucket_mb << 20;
    ds.options.overlap = par.overlap;
    ds.zero_stage = stage;
    if (stage == 3) {
      ds.units = zero3_units();
      // The experts are the expert axis's own units (expert_parallel_strategy.h).
      if (expert_)
        for (parallel::Zero3Unit& u : ds.units)
          std::erase_if(u.params, [this](const std::string& p) { return expert_->holds(p); });
      std::erase_if(ds.units, [](const parallel::Zero3Unit& u) { return u.params.empty(); });
    }
    ds.after_other_sums = tensor_ && tensor_->sums_gradients() && stage >= 2;
    // Weights from a checkpoint are loaded on every rank alike; recipes give every rank the same
    // values by construction: nothing to broadcast.
    ds.broadcast = false;
    ds.copy_values = false;
    // Offloaded: the shards are laid out in chunks and filled there (build_offload_shards).
    ds.allocate_shards = !config_.memory.enabled();
    // And ZeRO-2/3's gradient shards: each reduction writes into its chunk.
    ds.options.allocate_gradient_shards = !config_.memory.enabled();
    // And the gradient buckets' full buffers (ZeRO-1's all-reduced ones, ZeRO-2/3's
    // reduce-scattered ones), when each fits a chunk (build_offload_shards).
    ds.options.allocate_buckets = !config_.memory.enabled();
    // The experts' gradients are summed over their own group (expert_parallel_strategy.h).
    NamedTensors dense = trainable_parameters();
    if (expert_)
      std::erase_if(dense, [this](const auto& named) { return expert_->holds(named.first); });
    data_ = std::make_unique<DataParallelStrategy>(dense, dp_, std::move(ds));
    if (pipeline_) {
      std::vector<parallel::Zero3Parameters*> parts;
      for (const auto& [buckets, z3] : zero3_parts()) parts.push_back(z3);
      pipeline_->set_zero3(std::move(parts));
    }
  } else if (stage > 0) {
    print("note: parallel.zero_stage = " + std::to_string(stage) +
          " has nothing to partition on one rank; training with the plain optimizer");
  }
  // Every axis has cut the shape-only model: each rank allocates only what it now holds (ZeRO-3
  // has allocated its blocks) and computes its values (before the 16-bit copies are made from
  // them); a checkpoint in pieces fills them later (load_checkpoint). A one-process offloaded
  // run computes each value in its chunk instead (build_offload), never allocating the whole.
  // Under dp, ZeRO-3's shards likewise (build_offload_shards); the parameters held whole are
  // filled here.
  if (!(config_.memory.enabled() && !dp_)) {
    materialize_held_parameters();
    if (init) fill_parameters(init, /*zero3_shards=*/!config_.memory.enabled());
  } else if (pipeline_) {
    // Offloaded pipeline stage: its own parameters go into chunks (build_offload); the last
    // stage's copy of a tied embedding, which it multiplies with but does not train, stays plain
    // memory, filled as an in-memory stage fills it.
    std::set<std::string> own;
    for (const auto& [name, param] : trainable_parameters()) own.insert(name);
    for (const auto& [name, param] : held_whole_parameters()) {
      if (own.count(name)) continue;
      param.storage().materialize();
      if (init)
        fill_placed(init, name, checkpoint_placement(name, param.shape()), param.shape(), 0,
                    param.numel(), param.detach().flatten());
    }
  }
  if (dtype != DType::F32) {
    PrecisionSetup ps;
    ps.precision = t.precision;
    ps.loss_scale_init = t.loss_scale_init;
    ps.loss_scale_window = t.loss_scale_window;
    ps.modules = stage_modules();
    for (const auto& [buckets, z3] : zero3_parts()) ps.zero3.push_back(z3);
    ps.layout = layout_;
    ps.print = printer;
    precision_ = std::make_unique<PrecisionStrategy>(std::move(ps));
  }
  const bool tp_first = data_ && tensor_ && data_->zero_stage() >= 2;
  AxisStrategy* dp_axis = data_.get();
  AxisStrategy* tp_axis = tensor_.get();
  const std::vector<AxisStrategy*> order = {precision_.get(), pipeline_.get(),
                                            tp_first ? tp_axis : dp_axis,
                                            tp_first ? dp_axis : tp_axis};
  for (AxisStrategy* s : order)
    if (s) strategies_.push_back(s);
  if (expert_) strategies_.push_back(expert_.get());
  // Under dp the shards to offload are ZeRO's optimizer's too: laid out once it exists (build()).
  if (config_.memory.enabled()) {
    check_offload_layout();
    if (!dp_) build_offload(init);
  }
}

// What this rank holds of the experts (before ZeRO-3 partitions them): divided by ep, and by tp
// under expert tensor parallelism (the output biases stay whole).
std::string Trainer::expert_bytes_line() const {
  int64_t bytes = 0, layers = 0;
  for (const auto& [name, module] : model_->named_modules()) {
    const auto* moe = dynamic_cast<const nn::MoE*>(module);
    if (moe == nullptr) continue;
    ++layers;
    for (const auto& [param, t] : moe->experts->named_parameters())
      bytes += t.numel() * int64_t(dtype_size(t.dtype()));
  }
  return "experts: " + std::to_string(bytes) + " parameter bytes of " + std::to_string(layers) +
         " MoE layers on this rank";
}

memory::MemoryConfig Trainer::offload_memory_config() const {
  const MemorySection& m = config_.memory;
  memory::MemoryConfig mc;
  mc.chunk_bytes = parse_byte_size("memory.chunk_size", m.chunk_size);
  mc.device_budget = parse_byte_size("memory.device_budget", m.device_budget);
  mc.host_budget = parse_byte_size("memory.host_budget", m.host_budget);
  mc.nvme_dir = m.nvme_dir;
  mc.nvme_budget = parse_byte_size("memory.nvme_budget", m.nvme_budget);
  return mc;
}

void Trainer::build_offload(const RegionSource& init) {
  const MemorySection& m = config_.memory;
  OffloadSetup os;
  os.memory = offload_memory_config();
  os.prefetch = int(m.prefetch);
  // Under tp or pp each rank's NVMe files go into a folder of its own, as under dp.
  if ((tensor_ || pipeline_) && !os.memory.nvme_dir.empty() &&
      std::filesystem::is_directory(os.memory.nvme_dir))
    os.memory.nvme_dir = rank_nvme_dir(os.memory.nvme_dir);
  os.params = trainable_parameters();
  // With pp, this stage's units, each held around its own module's forward (zero3_units()).
  os.units = pipeline_ ? zero3_units() : parallel::zero3_units(*model_, model_->unit_paths());
  // Start-up streams: the model was built shape-only (nothing written), and each parameter is
  // computed from its recipe or read from its file straight into its chunk as the layout is
  // sealed, chunk by chunk within the budgets. Without a source (a checkpoint in pieces being
  // resumed) the chunks start as zeros and the load fills them, one chunk at a time.
  os.init = [this, init](const std::string& name, const Tensor& dst) {
    if (!init) return;
    TESSEL_CHECK(dst.dtype() == DType::F32, "offload: parameter '", name, "' is ",
                 dtype_name(dst.dtype()), "; offloaded start-up fills f32 parameters");
    fill_placed(init, name, checkpoint_placement(name, dst.shape()), dst.shape(), 0, dst.numel(),
                dst.flatten());
  };
  if (precision_) {  // the 16-bit copies live in chunks of their own, kept between steps
    os.compute = precision_->compute_dtype();
    os.low_precision_roots = stage_modules();
    os.copies_span_step = pipeline_ != nullptr;
  }
  offload_ = std::make_unique<OffloadStrategy>(std::move(os));
  strategies_.push_back(offload_.get());
  use_offloaded_copies();
  // tp's gradient sums (sequence parallelism, replicated K/V pieces) write gradient chunks.
  if (tensor_) tensor_->set_gradient_hold(offload_->gradient_hold());
  // pp: the tied embedding's gradient sum and weight exchange, and the model's sync, read and
  // write this stage's chunks.
  if (pipeline_) pipeline_->set_hold(offload_->gradient_hold());
}

std::string Trainer::rank_nvme_dir(const std::string& nvme_dir) const {
  const std::filesystem::path own =
      std::filesystem::path(nvme_dir) / ("rank" + std::to_string(layout_.world_rank()));
  std::error_code ec;
  std::filesystem::create_directories(own, ec);
  TESSEL_CHECK(!ec, "memory.nvme_dir: cannot create ", own.string(), " for rank ",
               layout_.world_rank(), ": ", ec.message());
  return own.string();
}

void Trainer::use_offloaded_copies() {
  if (!precision_ || !offload_->has_copies()) return;
  OffloadStrategy* offload = offload_.get();  // outlives the step's scopes
  precision_->set_kept_copies(offload_->kept_copies(), [offload](nn::LowPrecisionScope* scope) {
    offload->set_low_precision(scope);
  });
}

// Each rank's own shards (ZeRO-Infinity): ZeRO-3's parameter shards unit by unit in forward
// order with their gradient shards and moments' shards; below stage 3 the gradient shards
// (stage 2) and the moments' shards bucket by bucket, in the update's order. Each rank's NVMe files
// go into a folder of its own under memory.nvme_dir.
void Trainer::build_offload_shards(const RegionSource& init) {
  OffloadShardSetup os;
  os.memory = offload_memory_config();
  os.prefetch = int(config_.memory.prefetch);
  os.zero_stage = zero_->stage();
  if (!os.memory.nvme_dir.empty() && std::filesystem::is_directory(os.memory.nvme_dir)) {
    const std::filesystem::path own =
        std::filesystem::path(os.memory.nvme_dir) / ("rank" + std::to_string(layout_.world_rank()));
    std::error_code ec;
    std::filesystem::create_directory(own, ec);
    TESSEL_CHECK(!ec, "train: cannot create ", own.string(), " for rank ", layout_.world_rank(),
                 "'s NVMe tier: ", ec.message());
    os.memory.nvme_dir = own.string();
  }  // a missing memory.nvme_dir is the chunk manager's one error
  const NamedTensors state = zero_->local_state();  // exp_avg.b<i>, exp_avg_sq.b<i> per bucket
  auto moments = [&](int64_t b, OffloadShard& s) {
    const std::string suffix = "b" + std::to_string(b);
    for (const auto& [name, t] : state) {
      if (name == "exp_avg." + suffix) s.exp_avg = t;
      if (name == "exp_avg_sq." + suffix) s.exp_avg_sq = t;
    }
  };
  // The buckets' full gradient buffers go into chunks when every one fits a chunk; otherwise they
  // are plain memory (the bucket size sets how ZeRO shards the moments, and ZeRO-3's buckets are
  // its units, so it is not cut to fit). Under dp x tp, tp's gradient sums (sequence parallelism's
  // whole parameters, replicated K/V pieces) read and write gradients beside the buckets' use of
  // them: the buffers stay plain memory then.
  // Under --ep at ZeRO-2/3 they stay plain memory too: the experts' own buckets are not laid out
  // beside them in the device tier's working set yet.
  const bool tp_sums = tensor_ && tensor_->sums_gradients();
  const bool stage1 = zero_->stage() == 1;
  if (tp_sums)
    print(stage1 ? "note: ZeRO-1's all-reduced gradient buckets stay in plain memory: tensor "
                   "parallelism sums gradients inside them after the all_reduce"
                 : "note: the buckets' full gradient buffers stay in plain memory: tensor "
                   "parallelism sums gradients inside them");
  if (expert_zero_ && !stage1)
    print(
        "note: the buckets' full gradient buffers stay in plain memory under expert "
        "parallelism");
  const bool buckets_in_chunks =
      !tp_sums && (stage1 || !expert_zero_) && buckets_fit(os.memory.chunk_bytes);
  if (!buckets_in_chunks) ddp()->allocate_bucket_buffers();
  if (parallel::Zero3Parameters* z = zero3()) {
    for (size_t k = 0; k < z->unit_count(); ++k) {
      OffloadShard s;
      const int64_t b = z->unit_bucket(k);
      s.name = z->unit_name(k);
      s.bucket = b;
      s.param = z->parameter_shard(b);
      s.grad = ddp()->gradient_shard(b);
      if (buckets_in_chunks) s.full = ddp()->bucket_buffer(b);
      moments(b, s);
      os.shards.push_back(std::move(s));
    }
  } else {
    for (int64_t b = 0; b < ddp()->bucket_count(); ++b) {
      OffloadShard s;
      s.name = "bucket " + std::to_string(b);
      if (zero_->stage() == 2) {
        s.grad = ddp()->gradient_shard(b);
        if (buckets_in_chunks) s.full = ddp()->bucket_buffer(b);
      } else if (buckets_in_chunks) {  // ZeRO-1: the all-reduced buffer is the average itself
        s.grad = ddp()->bucket_buffer(b);
      }
      moments(b, s);
      os.shards.push_back(std::move(s));
    }
  }
  if (parallel::Zero3Parameters* z = zero3(); z && init) {
    parallel::DataParallel* buckets = ddp();
    os.init_param = [this, init, buckets](int64_t bucket, const Tensor& dst) {
      fill_zero3_shard(init, *buckets, bucket, dst);
    };
  }
  if (expert_zero_) add_expert_offload_shards(os, init);
  if (precision_ && !zero3()) {  // ZeRO-1/2: the replicas' 16-bit copies in chunks, per unit
    os.replicas = trainable_parameters();
    os.units = zero3_units();
    os.compute = precision_->compute_dtype();
    os.low_precision_roots = stage_modules();
    os.copies_span_step = pipeline_ != nullptr;
  }
  offload_ = std::make_unique<OffloadStrategy>(std::move(os));
  strategies_.push_back(offload_.get());
  use_offloaded_copies();
  if (zero3()) zero3()->set_shard_hold(offload_->shard_hold());
  zero_->set_shard_hold(offload_->shard_hold());
  // The gradients in chunks (shards, or ZeRO-1's buckets): the reductions, the norm, the scaling.
  ddp()->set_shard_hold(offload_->bucket_hold());
  sharded_->set_gradient_hold(offload_->gradient_hold());
  // dp x tp: tp's gradient sums hold what they touch in chunks (ZeRO-1's buckets stay plain
  // memory when tp sums, above; the sums at ZeRO-2/3 precede the reductions).
  if (tensor_) tensor_->set_gradient_hold(offload_->gradient_hold());
  // pp x dp: the first stage adds the head's gradient of the tied embedding into its bucket's
  // chunk under the bucket's hold (into .grad() when the buckets are plain memory).
  if (pipeline_) {
    pipeline_->set_hold(offload_->gradient_hold());
    parallel::DataParallel* buckets = ddp();
    if (!buckets->options().allocate_buckets)
      pipeline_->set_add_gradient([buckets](const std::string& name, const Tensor& head) {
        buckets->add_to_gradient(name, head);
      });
  }
  if (expert_zero_) {  // the experts' shards: their own gathers, reductions, scaling and update
    if (parallel::Zero3Parameters* z = expert_->zero3()) z->set_shard_hold(offload_->shard_hold());
    expert_zero_->set_shard_hold(offload_->shard_hold());
    expert_->zero_buckets()->set_shard_hold(offload_->shard_hold());
    expert_sharded_->set_gradient_hold(offload_->gradient_hold());
    expert_->set_gradient_hold(offload_->gradient_hold());
  }
}

// --ep: this rank's shards of its experts' buckets (over their own group) follow the dense ones,
// laid out as they are: ZeRO-3's parameter shards unit by unit (one unit per MoE layer) with their
// gradient and moments' shards, below stage 3 the moments' shards (and stage 2's gradient shards)
// bucket by bucket. ZeRO-1's all-reduced expert buckets stay plain memory
// (expert_parallel_strategy.h).
void Trainer::add_expert_offload_shards(OffloadShardSetup& os, const RegionSource& init) {
  parallel::DataParallel* buckets = expert_->zero_buckets();
  const NamedTensors state = expert_zero_->local_state();
  auto moments = [&](int64_t b, OffloadShard& s) {
    const std::string suffix = "b" + std::to_string(b);
    for (const auto& [name, t] : state) {
      if (name == "exp_avg." + suffix) s.exp_avg = t;
      if (name == "exp_avg_sq." + suffix) s.exp_avg_sq = t;
    }
  };
  if (parallel::Zero3Parameters* z = expert_->zero3()) {
    for (size_t k = 0; k < z->unit_count(); ++k) {
      OffloadShard s;
      const int64_t b = z->unit_bucket(k);
      s.name = z->unit_name(k);
      s.bucket = b;
      s.gathers = 1;
      s.param = z->parameter_shard(b);
      s.grad = buckets->gradient_shard(b);
      moments(b, s);
      if (init)
        s.init_param = [this, init, buckets, b](const Tensor& dst) {
          fill_zero3_shard(init, *buckets, b, dst);
        };
      os.shards.push_back(std::move(s));
    }
    return;
  }
  for (int64_t b = 0; b < buckets->bucket_count(); ++b) {
    OffloadShard s;
    s.name = "expert bucket " + std::to_string(b);
    s.bucket = b;
    if (expert_->zero_stage() == 2) s.grad = buckets->gradient_shard(b);
    moments(b, s);
    os.shards.push_back(std::move(s));
  }
}

// Whether every bucket's full buffer fits one chunk of `chunk_bytes` (rounded as the chunk manager
// rounds); prints a note naming the largest bucket otherwise.
bool Trainer::buckets_fit(size_t chunk_bytes) {
  const int64_t chunk = int64_t((chunk_bytes + 4095) / 4096 * 4096);
  int64_t largest = 0;
  for (int64_t b = 0; b < ddp()->bucket_count(); ++b)
    largest = std::max(largest, (ddp()->bucket_nbytes(b) + 63) / 64 * 64);
  if (largest <= chunk) return true;
  const int stage = zero_->stage();
  print(std::string("note: ZeRO-") + std::to_string(stage) + "'s " +
        (stage == 1 ? "all-reduced" : "full") +
        " gradient buckets stay in plain memory: the largest, " + std::to_string(largest) +
        " bytes, does not fit a chunk of " + std::to_string(chunk) + " bytes (" +
        (stage == 3 ? "a bucket is a unit's; " : "lower parallel.bucket_mb or ") +
        "raise memory.chunk_size)");
  return false;
}

// The model's units (one per block, then the final norm, CausalLM::unit_paths); the rest (the
// embeddings, which a tied LM head uses again at the end of forward and the start of backward) is
// the root's unit. With pp, only the units of this rank's stages.
std::vector<parallel::Zero3Unit> Trainer::zero3_units() {
  std::vector<parallel::Zero3Unit> units = parallel::zero3_units(*model_, model_->unit_paths());
  if (!pipeline_) return units;
  std::set<std::string> own;
  for (const auto& [name, param] : trainable_parameters()) own.insert(name);
  std::vector<parallel::Zero3Unit> out;
  for (parallel::Zero3Unit& u : units) {
    std::erase_if(u.params, [&](const std::string& p) { return !own.count(p); });
    if (u.params.empty()) continue;
    // A stage never runs the root's forward: the embeddings' own modules carry the hooks.
    if (u.module == model_.get()) {
      TESSEL_CHECK(u.params.size() == 1 && model_->layer_of_parameter(u.params[0]) == 0,
                   "train: parallel.zero_stage 3 with pp: parameter '", u.params[0],
                   "' belongs to no module a pipeline stage runs (an untied LM head is not "
                   "supported with pp and ZeRO-3)");
      u.module = owner_module(*model_, u.params[0]);
    }
    out.push_back(std::move(u));
  }
  return out;
}

std::vector<std::pair<parallel::DataParallel*, parallel::Zero3Parameters*>> Trainer::zero3_parts()
    const {
  std::vector<std::pair<parallel::DataParallel*, parallel::Zero3Parameters*>> out;
  if (zero3()) out.emplace_back(ddp(), zero3());
  if (expert_ && expert_->zero3()) out.emplace_back(expert_->zero_buckets(), expert_->zero3());
  return out;
}

std::shared_ptr<void> Trainer::gather_all_zero3() const {
  // Dense units first, then the experts': the same order on every rank.
  std::vector<std::shared_ptr<void>> held;
  for (const auto& [buckets, z3] : zero3_parts()) held.push_back(zero3_gather_all(z3));
  if (held.empty()) return nullptr;
  return std::make_shared<std::vector<std::shared_ptr<void>>>(std::move(held));
}

Tensor Trainer::compute_loss(const Tensor& ids, const Tensor& targets) {
  if (!device_.is_cpu()) return model_->loss(on_run_device(ids), on_run_device(targets));
  return tensor_ ? tensor_->loss(ids, targets) : model_->loss(ids, targets);
}

Tensor Trainer::compute_eval_loss(const Tensor& ids, const Tensor& targets) {
  if (const ModelTensorParallel* t = tp()) return model_tp_eval_loss(*model_, *t, ids, targets);
  return model_->eval_loss(on_run_device(ids), on_run_device(targets));
}

NamedTensors Trainer::trainable_parameters() const {
  return pipeline_ ? pipeline_->trainable_parameters() : model_->named_parameters();
}

std::vector<nn::Module*> Trainer::stage_modules() const {
  if (!pipeline_) return {model_.get()};
  return pipeline_->modules();
}

}  // namespace tessel::train
