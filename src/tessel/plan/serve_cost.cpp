// SPDX-License-Identifier: Apache-2.0
// The serving cost model (Pope et al. 2022): the geometry of a model on meta, and one step's time
// and memory under a tensor layout. docs/PLANNER.md, "Serving plans".
#include "tessel/plan/serve_cost.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/models/rotary_rows.h"
#include "tessel/plan/comm_cost.h"
#include "tessel/plan/trace_recorder.h"
#include "tessel/tensor/default_device.h"
#include "tessel/tensor/meta_allocator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::plan {

ServeShape serve_shape(const models::ModelConfig& config) {
  ServeShape s;
  s.name = config.summary();
  const models::KvGeometry kv = config.kv_geometry();
  s.layers = config.num_layers();
  s.d_model = config.hidden_size();
  s.heads = config.num_heads();
  s.kv_heads = kv.kv_heads;
  s.head_dim = kv.head_dim;
  s.vocab = config.vocabulary_size();
  s.max_positions = config.max_positions();
  s.parameter_count = config.parameter_count();
  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (config.has_experts()) {
    count_moe_matrices(*model, s);
  } else {
    std::set<const void*> seen;
    for (const auto& [name, p] : model->named_parameters()) {
      if (p.ndim() != 2 || model->layer_of_parameter(name) != 1) continue;  // block 0's matrices
      if (!seen.insert(p.storage_ptr().get()).second) continue;
      s.block_matrix_params += p.numel();
      for (int64_t d : {p.shape()[0], p.shape()[1]}) s.d_ff = std::max(s.d_ff, d);
    }
  }
  // The kernels of one forward of one token (a mixture of experts routes each token to k experts
  // in turn on meta, nn/moe.cpp): a step runs as many whatever its rows. What the
  // model still holds after it is what it made on first use: a rotary model's position tables,
  // rotary_table_rows(0, 1, max_positions) rows of them (models/rotary_rows.h).
  Graph graph;
  Recorder recorder(graph, false);
  const double held = double(meta_allocator().bytes_in_use());
  {
    autograd::NoGradGuard no_grad;
    kernels::KernelObserverScope observe(recorder);
    model->forward(empty({1, 1}, DType::I64));
  }
  s.kernels_per_forward = int64_t(graph.ops.size());
  const double tables = double(meta_allocator().bytes_in_use()) - held;
  s.rotary_bytes_per_position =
      int64_t(tables) / std::max<int64_t>(1, models::rotary_table_rows(0, 1, s.max_positions));
  TESSEL_CHECK(s.block_matrix_params > 0, "plan --serve: ", s.name,
               " has no matrices in its first block");
  return s;
}

std::string_view serve_phase_name(ServePhase p) {
  return p == ServePhase::Prefill ? "prefill" : "decode";
}

std::string_view ffn_layout_name(FfnLayout l) {
  switch (l) {
    case FfnLayout::WeightStationary1D:
      return "1d-ws";
    case FfnLayout::WeightStationary2D:
      return "2d-ws";
    case FfnLayout::WeightGathered:
      return "wg";
  }
  return "?";
}

std::string_view attention_sharding_name(AttentionSharding a) {
  return a == AttentionSharding::Heads ? "heads" : "batch";
}

std::string ServeLayout::describe() const {
  std::string s = std::string(ffn_layout_name(ffn)) + (ep > 1 ? " ep=" + std::to_string(ep) : "") +
                  " tp=" + std::to_string(tp);
  if (ffn == FfnLayout::WeightStationary2D)
    s += " (x=" + std::to_string(x) + ", yz=" + std::to_string(tp / x) + ")";
  return s + " pp=" + std::to_string(pp) +
         " attn=" + std::string(attention_sharding_name(attention));
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

std::vector<int> iota_ranks(int n, int stride = 1) {
  std::vector<int> r(size_t(n), 0);
  for (int i = 0; i < n; ++i) r[size_t(i)] = i * stride;
  return r;
}

double cost_of(const Cluster& c, Collective op, const std::vector<int>& ranks, double bytes) {
  if (ranks.size() < 2 || bytes <= 0) return 0;
  return collective_cost(c, op, ranks, bytes).seconds;
}

// The collectives of one stage's step (its `layers` blocks and, on the last stage, the head):
// rows = the step's tokens in the stage, seqs = its sequences.
double stage_comm_seconds(const Cluster& c, const ServeShape& s, const ServeLayout& l,
                          const ServeWorkload& w, double rows, double seqs, int64_t layers,
                          bool head) {
  const int n = l.tp;
  if (n == 1) return 0;
  const std::vector<int> all = iota_ranks(n);
  const double ab = w.act_bytes, E = double(s.d_model), F = double(s.d_ff);
  const double HD = double(s.heads * s.head_dim);
  double per_layer = 0;
  if (l.ffn == FfnLayout::WeightStationary1D) {
    // Megatron: each block's attention and MLP end in an all-reduce of the rows' activations.
    per_layer = (s.parallel_block ? 1 : 2) * cost_of(c, Collective::AllReduce, all, rows * E * ab);
    if (l.attention == AttentionSharding::Batch)  // queries to their sequences' rank and back
      per_layer += 2 * cost_of(c, Collective::AllToAll, all, rows * HD * ab);
  } else if (l.ffn == FfnLayout::WeightStationary2D) {
    // Weights [E over X, F over YZ]: the input is all-gathered over YZ, the partial sums
    // reduce-scattered over X, the hidden all-gathered over X, the output reduce-scattered over
    // YZ (the paper's 3.2.2); attention the same with its H·D inner width.
    const int x = l.x, yz = n / l.x;
    const std::vector<int> xs = iota_ranks(x), yzs = iota_ranks(yz, x);
    auto block = [&](double inner) {
      return cost_of(c, Collective::AllGather, yzs, rows * E / x * ab) +
             cost_of(c, Collective::ReduceScatter, xs, rows * inner / yz * ab) +
             cost_of(c, Collective::AllGather, xs, rows * inner / yz * ab) +
             cost_of(c, Collective::ReduceScatter, yzs, rows * E / x * ab);
    };
    per_layer = s.parallel_block ? block(F + HD) : block(F) + block(HD);
    if (l.attention == AttentionSharding::Batch)
      per_layer += 2 * cost_of(c, Collective::AllToAll, all, rows * HD * ab);
  } else {
    // Weight-gathered: every chip gathers each layer's weights and runs its share of the batch.
    per_layer =
        cost_of(c, Collective::AllGather, all, double(s.block_matrix_params) * w.weight_bytes);
  }
  double t = double(layers) * per_layer;
  if (head) {
    if (l.ffn == FfnLayout::WeightGathered)
      t += cost_of(c, Collective::AllGather, all, double(s.vocab) * E * w.weight_bytes);
    else  // the vocabulary-split head: the sampled rows' f32 logits gathered
      t += cost_of(c, Collective::AllGather, all, seqs * double(s.vocab) * 4);
  }
  return t;
}

}  // namespace

ServeCost serve_cost(const Cluster& c, const ServeShape& s, const ServeLayout& l,
                     const ServeWorkload& w, const TpWeightCount& tp_weights,
                     const models::ModelConfig* config, const ServeMemoryFn& memory) {
  TESSEL_CHECK(l.tp >= 1 && l.pp >= 1 && l.x >= 1 && l.tp % l.x == 0, "plan --serve: layout ",
               l.describe(), " is not a split of its chips");
  TESSEL_CHECK(l.pp <= s.layers, "plan --serve: pp ", l.pp, " exceeds the model's ", s.layers,
               " blocks");
  TESSEL_CHECK(c.num_devices() >= l.chips(), "plan --serve: ", l.describe(), " needs ", l.chips(),
               " devices, the cluster has ", c.num_devices());
  TESSEL_CHECK(w.batch >= 1 && w.prompt >= 1 && w.context >= 0, "plan --serve: batch ", w.batch,
               ", prompt ", w.prompt, ", context ", w.context, " must be positive");
  ServeCost r;
  const int n = l.tp, p = l.pp;
  const bool prefill = w.phase == ServePhase::Prefill;
  const double E = double(s.d_model), HD = double(s.heads * s.head_dim);
  const int64_t stage_layers = ceil_div(s.layers, p);
  // One group of sequences per stage is in flight (tessel's --pp-groups default).
  const double seqs = double(ceil_div(w.batch, p));
  const double tokens = prefill ? double(w.prompt) : 1.0;
  const double rows = seqs * tokens;
  // Model FLOPs of one group through one stage (the last stage adds the head on the sampled
  // rows: the engine applies it to each sequence's last position only).
  const double block_flops = 2.0 * rows * double(stage_layers) * double(s.block_matrix_params);
  const double pairs =
      prefill ? seqs * double(w.prompt) * double(w.prompt + 1) / 2.0 : seqs * double(w.context + 1);
  const double attn_flops = 4.0 * HD * pairs * double(stage_layers);
  const double head_flops = 2.0 * seqs * double(s.vocab) * E;
  // A mixture of experts (plan/serve_moe.h): each token multiplies with its k experts a MoE layer,
  // the stage's share of them, computed by the ep x tp ranks that hold them; the step reads the
  // experts some token chose, the rank's columns of its experts.
  const ServeExperts& ex = s.experts;
  const int ep = l.ep;
  const double stage_share = double(stage_layers) / double(s.layers);
  const double expert_flops = 2.0 * rows * ex.active_params * stage_share;
  // Compute: every layout splits the FLOPs evenly over the stage's chips; the products run at
  // the GEMM efficiency calibration measured for a chip's share of the product.
  const double peak = c.peak_flops(w.peak_dtype);
  const bool gathered = l.ffn == FfnLayout::WeightGathered;
  const int64_t m = std::max<int64_t>(1, int64_t(gathered ? rows / n : rows));
  const int64_t out =
      std::max<int64_t>(1, l.ffn == FfnLayout::WeightStationary1D   ? s.d_ff / n
                           : l.ffn == FfnLayout::WeightStationary2D ? s.d_ff / (n / l.x)
                                                                    : s.d_ff);
  const int64_t in =
      std::max<int64_t>(1, l.ffn == FfnLayout::WeightStationary2D ? s.d_model / l.x : s.d_model);
  const double eff = c.gemm_efficiency(w.peak_dtype, m, out, in, "nt");
  const double block_compute = block_flops / (n * peak * eff) + attn_flops / (n * peak) +
                               expert_flops / (double(ep) * n * peak * eff);
  const double head_compute = head_flops / (n * peak * eff);
  // Memory traffic of one chip: its weights (all of them once gathered), its KV heads' or its
  // sequences' cache read, the step's new keys and values written.
  const double block_w = double(stage_layers) * double(s.block_matrix_params) * w.weight_bytes;
  const double head_w = double(s.vocab) * E * w.weight_bytes;
  const double block_read = gathered ? block_w : block_w / n;
  const double head_read = gathered ? head_w : head_w / n;
  const bool batch_attn = l.attention == AttentionSharding::Batch;
  const double kv_heads_rank = batch_attn
                                   ? double(s.kv_heads)
                                   : double(ceil_div(s.kv_heads, std::min<int64_t>(n, s.kv_heads)));
  // KV bytes of one token of one sequence in this rank's layers and heads.
  const double kv_token =
      2.0 * double(stage_layers) * kv_heads_rank * double(s.head_dim) * w.kv_bytes;
  const double seqs_rank = batch_attn ? std::ceil(seqs / n) : seqs;
  const double kv_read = prefill ? 0 : seqs_rank * double(w.context) * kv_token;
  const double kv_write = seqs_rank * tokens * kv_token;
  const double expert_read = expert_params_per_rank(ex, ep, n) * stage_share *
                             expert_read_fraction(ex, rows) * w.weight_bytes;
  const double block_bytes = block_read + kv_read + kv_write + expert_read;
  r.memory_bytes = block_bytes + head_read;  // the last stage's chip
  const double bw = c.device.memory_bandwidth;
  // Op overhead (calibrated CPUs): the kernels of one forward, a stage's share of the blocks.
  const double stage_overhead = c.device.op_overhead * double(s.kernels_per_forward) *
                                double(stage_layers) / double(s.layers);
  const double block_comm =
      stage_comm_seconds(c, s, l, w, rows, seqs, stage_layers, false) +
      moe_comm_seconds(c, ex, s.d_model, ep, n, rows, stage_layers, s.layers, w.act_bytes);
  const double head_comm = stage_comm_seconds(c, s, l, w, rows, seqs, 0, true);
  // Each stage is bound by the longer of its compute and its memory traffic; the head runs on
  // the last stage only.
  const double stage = std::max(block_compute, block_bytes / bw);
  const double last = std::max(block_compute + head_compute, r.memory_bytes / bw);
  r.compute_seconds = p * block_compute + head_compute;
  r.memory_seconds = (p * block_bytes + head_read) / bw;
  r.overhead_seconds = p * stage_overhead;
  r.comm_seconds = p * block_comm + head_comm;
  if (p > 1)
    r.pipeline_seconds = (p - 1) * collective_cost(c, Collective::SendRecv, std::vector<int>{0, n},
                                                   rows * E * w.act_bytes)
                                       .seconds;
  // A shared machine stretches the chips' own work as the training step's load term does
  // (StepTime::load_seconds: × (1 / cpu_share − 1); 0 on a description without cpu_share).
  r.load_seconds = ((p - 1) * stage + last + r.overhead_seconds) * (1.0 / c.device.cpu_share - 1.0);
  r.seconds = (p - 1) * stage + last + r.overhead_seconds + r.comm_seconds + r.pipeline_seconds +
              r.load_seconds;
  // A step moves every group one stage on; each group's tokens come out every `seconds`.
  const double step_tokens = double(w.batch) * tokens;
  r.flops = double(w.batch) / seqs *
            (2.0 * rows * (double(s.layers) * double(s.block_matrix_params) + ex.active_params) +
             4.0 * HD * pairs * double(s.layers) + head_flops);
  r.latency_per_token = r.seconds;  // decode: a step is one token of every sequence
  r.chip_seconds_per_token = double(l.chips()) * r.seconds / step_tokens;
  r.mfu = r.flops / (r.seconds * l.chips() * peak);
  // Memory of one rank.
  const double all_params = double(s.parameter_count);
  const double other =
      all_params - double(s.layers) * double(s.block_matrix_params) - double(ex.expert_params);
  // The experts: E / ep of each layer's, tp rank 0's columns of them (the runtime's plan for the
  // dense parts leaves the MoE layers whole, so tp_weights counts them whole).
  const double experts_held = expert_params_per_rank(ex, ep, n);
  if (tp_weights && config && p == 1 && l.runnable()) {
    r.weight_bytes_per_rank =
        (double(tp_weights(*config, n)) - double(ex.expert_params) + experts_held) * w.weight_bytes;
  } else {
    r.weight_bytes_per_rank = ((double(stage_layers) * double(s.block_matrix_params) + other) / n +
                               experts_held * stage_share) *
                              w.weight_bytes;
    if (gathered) r.weight_bytes_per_rank += double(s.block_matrix_params) * w.weight_bytes;
  }
  const int64_t capacity = w.kv_capacity > 0 ? w.kv_capacity : s.max_positions;
  r.kv_bytes_per_token_per_rank = batch_attn ? kv_token / n : kv_token;
  // Every group's sequences hold their cache on every stage.
  const double seqs_held = batch_attn ? std::ceil(double(w.batch) / n) : double(w.batch);
  r.kv_bytes_per_rank = seqs_held * double(capacity) * kv_token;
  // Activations and workspace of `b` sequences on a rank: traced for what tessel runs (the
  // largest of its pipeline stages'), else the formula (at the rank's sequences when attention
  // is split by batch).
  const int64_t gen_prompt = std::min<int64_t>(w.prompt, capacity - 1);
  // A mixture of experts is traced without ep (plan/serve_moe.h: the ep gather's sizes depend on
  // the routing), and on one stage only (its pipeline stages keep the formula).
  r.workspace_traced = memory && config && l.runnable() && ep == 1 && (p == 1 || !s.experts.any());
  auto workspace = [&](int64_t b) {
    if (r.workspace_traced) {
      double most = 0;
      for (int stage = 0; stage < p; ++stage)
        most = std::max(most, memory(n, p, stage, b, gen_prompt, capacity).workspace());
      return most;
    }
    const int64_t rank_b = batch_attn ? ceil_div(b, n) : b;
    const double dense = serve_memory_formula(s, batch_attn ? 1 : n, rank_b, gen_prompt, capacity,
                                              w.act_bytes, w.kv_bytes)
                             .workspace();
    return std::max(dense, moe_workspace_bytes(s, ep, batch_attn ? 1 : n,
                                               double(rank_b) * double(gen_prompt), w.act_bytes));
  };
  r.workspace_bytes_per_rank = workspace(w.batch);
  if (r.workspace_traced)
    for (int stage = 0; stage < p; ++stage)
      r.stage_above_model_bytes.push_back(
          memory(n, p, stage, w.batch, gen_prompt, capacity).peak());
  r.peak_bytes_per_rank =
      r.weight_bytes_per_rank + r.kv_bytes_per_rank + r.workspace_bytes_per_rank;
  // What limits the batch: for the layouts tessel runs, the cache and the workspace; for the
  // others (no runtime of tessel's to hold them to: another implementation, as the paper's,
  // need not keep a block's intermediates whole) the cache alone, the workspace reported beside.
  const bool counted = l.runnable();
  const double free_bytes = double(c.device.memory_bytes) - r.weight_bytes_per_rank;
  const double per_seq = double(capacity) * kv_token;
  const int64_t step = batch_attn ? n : 1;  // sequences per extra one on a rank
  // The workspace grows linearly with the sequences from two on (one sequence reads its cache in
  // place, more gather theirs), so two points give it.
  const double w2 = counted ? workspace(2 * step) : 0, w3 = counted ? workspace(3 * step) : 0;
  const double per_rank_seq = per_seq + (w3 - w2);
  const double intercept = w2 - 2 * (w3 - w2);
  if (free_bytes < per_seq + (counted ? workspace(1) : 0))
    r.max_batch = 0;
  else
    r.max_batch = std::max<int64_t>(1, int64_t((free_bytes - intercept) / per_rank_seq) * step);
  r.fits = (counted ? r.peak_bytes_per_rank : r.weight_bytes_per_rank + r.kv_bytes_per_rank) <=
           double(c.device.memory_bytes);
  if (!r.fits)
    r.reason = free_bytes <= 0 ? "weights exceed the device memory"
                               : "KV cache and workspace of the batch exceed the device memory";
  return r;
}

}  // namespace tessel::plan
