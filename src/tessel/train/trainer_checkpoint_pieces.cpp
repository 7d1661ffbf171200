// SPDX-License-Identifier: Apache-2.0
// The trainer's side of layout-independent checkpoints (checkpoint_pieces.h): which pieces of the
// global parameters and AdamW moments this rank owns, and how a rank of any layout loads its
// own parts back. Ownership, so that every element is written exactly once:
//  - pipeline parallelism: a stage owns the parameters it trains (a tied embedding: the first
//  stage);
//  - tensor parallelism: a sharded parameter's rows per parallel::shard_ranges (per-head q, k, v
//    blocks; vocabulary padding rows belong to no tensor; a piece replicated over several ranks,
//    as K/V heads when tp exceeds them: the first of them); a replicated one: tp rank 0;
//  - ZeRO: a dp rank owns the elements of its block of each flat bucket (the moments, and under
//    stage 3 the parameters too); with expert parallelism the experts' buckets are blocked over
//    their expert group instead of dp;
//  - expert parallelism: a rank's experts are rows [r E / ep, (r + 1) E / ep) of each stacked
//    expert tensor, held by the dp / ep ranks of its expert group;
//  - whatever the dp ranks hold whole (parameters below stage 3, moments without ZeRO): dp rank r
//    writes elements [n r / dp, n (r + 1) / dp) of it, so saving is spread over every rank (an
//    expert part: over the ranks of its expert group).
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/io/mapped_file.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/sharding/shard_layout.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"
#include "tessel/train/pipeline_stage.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

const std::string kMoments[] = {"exp_avg.", "exp_avg_sq."};

// "exp_avg.h.0.mlp.c_fc.bias" -> "h.0.mlp.c_fc.bias"
std::string parameter_of(const std::string& key) {
  for (const std::string& prefix : kMoments)
    if (key.rfind(prefix, 0) == 0) return key.substr(prefix.size());
  return key;
}

// Calls fn(place, bucket, begin, end, at) for the part [begin, end) (the parameter's own flat
// elements) of every parameter inside this dp rank's block of each bucket; `at` is where that
// part starts in the block.
template <typename Fn>
void for_each_zero_part(const parallel::DataParallel& dp, Fn&& fn) {
  const int64_t rank = dp.comm().rank();
  for (const parallel::DataParallel::Place& p : dp.places()) {
    const int64_t shard = dp.shard_numel(p.bucket), lo = rank * shard;
    const int64_t begin = std::max(p.offset, lo);
    const int64_t end = std::min(p.offset + p.param.numel(), lo + shard);
    if (end > begin) fn(p, p.bucket, begin - p.offset, end - p.offset, begin - lo);
  }
}

Tensor zero_block(const NamedTensors& state, const std::string& prefix, int64_t bucket) {
  const std::string key = prefix + "b" + std::to_string(bucket);
  for (const auto& [name, t] : state)
    if (name == key) return t;
  TESSEL_FAIL("checkpoint: the ZeRO optimizer holds no ", key);
}

// Tensor `name` (shape `shape`) as stored, rows at a time.
void write_rows(PieceReader& reader, const std::string& name, const Shape& shape,
                const io::ByteSink& sink) {
  if (shape.numel() == 0) return;
  const int64_t rows = shape.ndim() > 0 ? shape[0] : 1, row = shape.numel() / rows;
  const int64_t block =
      std::max<int64_t>(1, int64_t(kCheckpointStagingBytes / sizeof(float)) / row);
  std::vector<float> buf(size_t(std::min(rows, block) * row));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    PieceRegion region = PieceRegion::whole(shape);
    const int64_t n = std::min(block, rows - r0);
    if (shape.ndim() > 0) {
      region.start[0] = r0;
      region.length[0] = n;
    }
    region.end = region.box_numel();
    reader.read(name, region, buf.data());
    sink(buf.data(), size_t(region.numel()) * sizeof(float));
  }
}

// A [rows, cols] tensor as its [cols, rows] transpose, blocks of columns at a time.
void write_transposed(PieceReader& reader, const std::string& name, const Shape& shape,
                      const io::ByteSink& sink) {
  const int64_t rows = shape[0], cols = shape[1];
  if (rows == 0 || cols == 0) return;
  const int64_t block =
      std::clamp<int64_t>(int64_t(kCheckpointStagingBytes / sizeof(float)) / rows, 1, cols);
  std::vector<float> in(size_t(rows * block)), out(size_t(rows * block));
  for (int64_t c0 = 0; c0 < cols; c0 += block) {
    const int64_t n = std::min(block, cols - c0);
    PieceRegion region = PieceRegion::whole(shape);
    region.start[1] = c0;
    region.length[1] = n;
    region.end = region.box_numel();
    reader.read(name, region, in.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < n; ++c) out[size_t(c * rows + r)] = in[size_t(r * n + c)];
    sink(out.data(), size_t(rows * n) * sizeof(float));
  }
}

}  // namespace

sharding::LocalLayout Trainer::checkpoint_placement(const std::string& param,
                                                    const Shape& local) const {
  const sharding::ShardLayout* spec = tp() ? tp()->result.spec(param) : nullptr;
  if (expert_ && expert_->holds(param)) {
    // Under expert tensor parallelism the ep block of experts holds this tp rank's FFN columns.
    const sharding::LocalLayout experts = expert_->placement(param, local);
    if (spec == nullptr) return experts;
    return sharding::LocalLayout::of(*spec, local, tp()->tp->size(), tp()->tp->rank())
        .within(experts);
  }
  if (spec == nullptr) return sharding::LocalLayout::whole(local);
  return sharding::LocalLayout::of(*spec, local, tp()->tp->size(), tp()->tp->rank());
}

std::vector<std::pair<parallel::DataParallel*, parallel::ZeroAdamW*>> Trainer::zero_optimizers()
    const {
  std::vector<std::pair<parallel::DataParallel*, parallel::ZeroAdamW*>> out;
  if (zero_) out.emplace_back(ddp(), zero_);
  if (expert_zero_) out.emplace_back(expert_->zero_buckets(), expert_zero_);
  return out;
}

std::string Trainer::checkpoint_layout_json() const {
  return nlohmann::json{{"dp", layout_.dp_size()},
                        {"tp", layout_.tp_size()},
                        {"pp", layout_.pp_size()},
                        {"ep", layout_.ep_size()},
                        {"zero_stage", zero_ ? zero_->stage() : 0},
                        {"sequence_parallel", tp() && tp()->sequence_parallel}}
      .dump();
}

std::vector<Piece> Trainer::checkpoint_pieces() const {
  std::vector<Piece> out;
  const bool tp_lead = layout_.tp_rank() == 0;
  auto owned_by_tp = [&](const std::string& param) {
    if (!tp()) return tp_lead;
    const TpShare share = model_tp_share(*tp(), param);
    return share == TpShare::Piece || (share == TpShare::Whole && tp_lead);
  };
  auto add = [&](const std::string& key, const std::string& param, const Shape& shape,
                 int64_t begin, int64_t end, const Tensor& flat) {
    for (Piece& p : placed_pieces(key, checkpoint_placement(param, shape), shape, begin, end, flat))
      out.push_back(std::move(p));
  };
  // Held whole by every dp rank: each writes its share.
  auto add_replicated = [&](const std::string& key, const Tensor& t) {
    const std::string param = parameter_of(key);
    if (!owned_by_tp(param)) return;
    int64_t d = layout_.dp_size(), r = layout_.dp_rank();
    if (expert_ && expert_->holds(param)) {
      const dist::CommPtr& group = expert_->expert_dp();
      d = group ? group->size() : 1;
      r = group ? group->rank() : 0;
    }
    const int64_t n = t.numel();
    const int64_t begin = n * r / d, end = n * (r + 1) / d;
    if (end > begin)
      add(key, param, t.shape(), begin, end, t.detach().flatten().narrow(0, begin, end - begin));
  };
  if (zero3()) {
    for (const auto& [buckets, z3] : zero3_parts())
      for_each_zero_part(*buckets,
                         [&](const auto& p, int64_t b, int64_t begin, int64_t end, int64_t at) {
                           if (owned_by_tp(p.name))
                             add(p.name, p.name, p.param.shape(), begin, end,
                                 z3->parameter_shard(b).narrow(0, at, end - begin));
                         });
  } else {
    for (const auto& [name, param] : trainable_parameters()) add_replicated(name, param);
  }
  if (zero_) {
    for (const auto& [buckets, zero] : zero_optimizers()) {
      const NamedTensors state = zero->local_state();
      for_each_zero_part(*buckets,
                         [&](const auto& p, int64_t b, int64_t begin, int64_t end, int64_t at) {
                           if (!owned_by_tp(p.name)) return;
                           for (const std::string& prefix : kMoments)
                             add(prefix + p.name, p.name, p.param.shape(), begin, end,
                                 zero_block(state, prefix, b).narrow(0, at, end - begin));
                         });
    }
  } else if (offload_) {
    // Views of the moments' chunks, in AdamW::state()'s order: the same pieces as in memory.
    const std::vector<OffloadedParameter> states = offload_->parameters();
    for (const OffloadedParameter& s : states) add_replicated(kMoments[0] + s.name, s.exp_avg);
    for (const OffloadedParameter& s : states) add_replicated(kMoments[1] + s.name, s.exp_avg_sq);
  } else {
    for (const auto& [key, moment] : adamw_->state()) add_replicated(key, moment);
  }
  return out;
}

void Trainer::fill_zero3_shard(const RegionSource& source, const parallel::DataParallel& dp,
                               int64_t bucket, const Tensor& shard) {
  for_each_zero_part(dp, [&](const auto& p, int64_t b, int64_t begin, int64_t end, int64_t at) {
    if (b != bucket) return;
    fill_placed(source, p.name, checkpoint_placement(p.name, p.param.shape()), p.param.shape(),
                begin, end, shard.narrow(0, at, end - begin));
  });
}

void Trainer::fill_parameters(const RegionSource& source, bool zero3_shards) {
  autograd::NoGradGuard no_grad;
  OffloadCheckpointAccess hold(offload_.get());
  // The whole local tensor `t`: filled in its own memory when it is f32 (tensors are
  // contiguous), else through one temporary of its size. Under offload, in its chunk.
  auto fill_whole = [&](const std::string& name, const Tensor& t) {
    if (offload_) offload_->hold_for_checkpoint(t, memory::AccessMode::ReadWrite);
    const bool direct = t.dtype() == DType::F32;
    Tensor flat = direct ? t.detach().flatten() : empty({t.numel()}, DType::F32);
    fill_placed(source, name, checkpoint_placement(name, t.shape()), t.shape(), 0, t.numel(), flat);
    if (!direct) t.detach().copy_from(flat.reshape(t.shape()));
  };
  for (const auto& [buckets, z3] : zero3_parts()) {
    if (!zero3_shards) break;
    std::set<int64_t> filled;  // the buckets with a part in this rank's block, each once
    for_each_zero_part(*buckets, [&, z3 = z3](const auto&, int64_t b, int64_t, int64_t, int64_t) {
      if (!filled.insert(b).second) return;
      if (offload_)
        offload_->hold_for_checkpoint(z3->parameter_shard(b), memory::AccessMode::ReadWrite);
      fill_zero3_shard(source, *buckets, b, z3->parameter_shard(b));
    });
  }
  for (const auto& [name, param] : held_whole_parameters()) fill_whole(name, param);
}

NamedTensors Trainer::held_whole_parameters() const {
  // A pipeline stage's model has every stage's parameters but uses only its own and, on the last
  // stage, the copy of a tied embedding; the others stay shape-only until an evaluation or the
  // sample brings them from their stages (PipelineStrategy::sync_model).
  std::set<std::string> sharded, used;
  for (const auto& [buckets, z3] : zero3_parts())
    for (const auto& p : buckets->places()) sharded.insert(p.name);
  for (const auto& [name, param] : trainable_parameters()) used.insert(name);
  if (pipeline_ && layout_.pp_rank() == layout_.pp_size() - 1)
    used.insert(pipeline_->tied().begin(), pipeline_->tied().end());
  NamedTensors out;
  for (const auto& [name, param] : model_->named_parameters())
    if (used.count(name) && !sharded.count(name)) out.emplace_back(name, param);
  return out;
}

void Trainer::materialize_held_parameters() const {
  for (const auto& [name, param] : held_whole_parameters()) param.storage().materialize();
}

int64_t Trainer::held_parameter_bytes() const {
  int64_t bytes = 0;
  for (const auto& [buckets, z3] : zero3_parts()) bytes += z3->shard_bytes();
  for (const auto& [name, param] : held_whole_parameters()) bytes += int64_t(param.nbytes());
  return bytes;
}

void Trainer::load_checkpoint_pieces(const std::string& dir, int64_t optimizer_step) {
  PieceReader reader(dir);
  for (const auto& [name, param] : model_->named_parameters())
    TESSEL_CHECK(reader.shape(name) == checkpoint_placement(name, param.shape()).global,
                 "checkpoint: ", name, " has shape ", reader.shape(name),
                 ", this run's layout expects ", checkpoint_placement(name, param.shape()).global);
  const RegionSource source = [&reader](const std::string& name, const PieceRegion& region,
                                        float* dst) { reader.read(name, region, dst); };
  fill_parameters(source);
  if (offload_) offload_->refresh_copies();  // mixed precision: the loaded masters, rounded
  fill_moments(
      source, [&reader](const std::string& key) { return reader.shape(key); }, optimizer_step);
}

void Trainer::fill_moments(const RegionSource& source,
                           const std::function<Shape(const std::string&)>& stored_shape,
                           int64_t optimizer_step) {
  OffloadCheckpointAccess hold(offload_.get());
  auto fill = [&](const std::string& key, const Shape& local, int64_t begin, int64_t end,
                  Tensor flat) {
    const sharding::LocalLayout placement = checkpoint_placement(parameter_of(key), local);
    const Shape shape = stored_shape(key);
    TESSEL_CHECK(shape == placement.global, "checkpoint: ", key, " has shape ", shape,
                 ", this run's layout expects ", placement.global);
    fill_placed(source, key, placement, local, begin, end, std::move(flat));
  };
  // The whole local tensor when it is f32, else through one temporary of its size.
  auto fill_whole = [&](const std::string& key, const Tensor& t) {
    const bool direct = t.dtype() == DType::F32;
    Tensor flat = direct ? t.detach().flatten() : empty({t.numel()}, DType::F32);
    fill(key, t.shape(), 0, t.numel(), flat);
    if (!direct) t.detach().copy_from(flat.reshape(t.shape()));
  };
  if (zero_) {
    for (const auto& [buckets, zero] : zero_optimizers()) {
      const NamedTensors state = zero->local_state();
      for_each_zero_part(
          *buckets, [&](const auto& p, int64_t b, int64_t begin, int64_t end, int64_t at) {
            for (const std::string& prefix : kMoments) {
              const Tensor block = zero_block(state, prefix, b);
              if (offload_) offload_->hold_for_checkpoint(block, memory::AccessMode::ReadWrite);
              fill(prefix + p.name, p.param.shape(), begin, end, block.narrow(0, at, end - begin));
            }
          });
      zero->set_step_count(optimizer_step);
    }
    hold.end();
  } else if (offload_) {
    // Into the moments' chunks, each held while it is filled.
    const std::vector<OffloadedParameter> states = offload_->parameters();
    for (const std::string& prefix : kMoments) {
      for (const OffloadedParameter& s : states) {
        const Tensor& m = prefix == kMoments[0] ? s.exp_avg : s.exp_avg_sq;
        offload_->hold_for_checkpoint(m, memory::AccessMode::ReadWrite);
        fill_whole(prefix + s.name, m);
      }
    }
    hold.end();
    offload_adamw_->set_step_count(optimizer_step);
    offload_adamw_->drop_gradients();  // as after an update: the next backward starts from zeros
  } else {
    // Into the moments themselves (state() gives them, not copies).
    for (const auto& [key, moment] : adamw_->state()) fill_whole(key, moment);
    adamw_->set_step_count(optimizer_step);
  }
}

void Trainer::write_checkpoint_model(const std::string& dir) const {
  // The HF-layout model (what `tessel generate` and `--init_from` read), assembled from the
  // pieces every rank just wrote, a bounded block at a time: rows of a tensor stored as tessel
  // holds it, blocks of columns transposed for one HF stores transposed (GPT-2's Conv1D). Rank 0
  // holds at most two blocks of kCheckpointStagingBytes, never a whole model.
  auto reader = std::make_shared<PieceReader>(dir);
  const models::Family& family = model_->model_config().family();
  std::vector<io::StreamedTensor> tensors;
  for (const auto& [name, local] : model_->named_parameters()) {
    const Shape shape = reader->shape(name);
    const bool transposed = family.hf_transposed(name);
    TESSEL_CHECK(!transposed || shape.ndim() == 2, "checkpoint: ", name, " of shape ", shape,
                 " is stored transposed, which needs two dimensions");
    io::StreamedTensor t{family.hf_name(name), DType::F32,
                         transposed ? Shape{shape[1], shape[0]} : shape, nullptr};
    t.write = [reader, name = name, shape, transposed](const io::ByteSink& sink) {
      if (transposed) {
        write_transposed(*reader, name, shape, sink);
      } else {
        write_rows(*reader, name, shape, sink);
      }
    };
    tensors.push_back(std::move(t));
  }
  io::save_safetensors_dir(dir, tensors);
  // config.json last, as models::save_model writes it: a directory with a config is complete.
  const std::string json = model_->model_config().to_json();
  io::write_file_atomic((fs::path(dir) / "config.json").string(), json.data(), json.size());
}

}  // namespace tessel::train
