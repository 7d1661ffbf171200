// SPDX-License-Identifier: Apache-2.0
// The planner's serving cost model, after Pope et al. 2022, "Efficiently Scaling Transformer
// Inference" (the PaLM inference paper): one forward of a serving step — a prefill of B prompts of
// T tokens, or a decode step of B sequences with C tokens of context each — on n chips under one
// tensor layout, predicted as
//
//   time = max(matmul and attention FLOPs / (chips x peak x GEMM efficiency),
//              (weights + KV cache read + KV written) / memory bandwidth) + op overhead
//          + the layout's collectives (plan/comm_cost.h) + pipeline sends (+ the load term of a
//          description calibrated under load, as the training step's),
//
// with the layouts of the paper's section 3: 1D weight-stationary (Megatron's column/row split,
// what `tessel serve --tp` runs), 2D weight-stationary (weights split over d_model on X chips and
// d_ff on YZ chips, X·YZ = n), and weight-gathered (weights all-gathered each layer, the batch
// split over the chips); attention sharded over heads (tessel's) or over the batch (the paper's
// choice for multi-query attention, whose single KV head heads-sharding would replicate); and
// tessel's pipeline stages (`--pp`, one group of sequences per stage in flight). The KV cache per
// rank and the largest batch the device memory holds come from the model's KV geometry, so multi-
// and grouped-query attention (fewer KV heads) shrink both the memory and the bytes a decode step
// reads. docs/PLANNER.md, "Serving plans", derives every term.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/plan/cluster.h"
#include "tessel/plan/serve_memory.h"
#include "tessel/plan/serve_moe.h"

namespace tessel::plan {

// What serving costs depend on: a model's geometry. From a tessel model (serve_shape) or written
// out for a model tessel has no family for (the paper's PaLM sizes).
struct ServeShape {
  std::string name;
  int64_t layers = 0, d_model = 0, d_ff = 0;  // d_ff: the MLP's inner width
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t vocab = 0;
  int64_t max_positions = 0;
  int64_t block_matrix_params = 0;  // the matrices one block multiplies with
  int64_t parameter_count = 0;      // everything the model holds
  // PaLM's parallel block: attention and MLP read one normalised input and their outputs are
  // summed, so tensor parallelism needs one all-reduce per layer instead of two.
  bool parallel_block = false;
  int64_t kernels_per_forward = 0;  // kernels of one forward (each pays device.op_overhead)
  // A mixture of experts' MoE layers (plan/serve_moe.h); block_matrix_params then counts a
  // block's dense matrices (the mean over the blocks, routers included) and not the experts.
  ServeExperts experts;
  // Bytes a model's position tables made on first use hold per position (a rotary model's cos
  // and sin, grown by models/rotary_rows.h); 0 for learned positions. Measured on meta.
  int64_t rotary_bytes_per_position = 0;
  // Matrix parameters a token's forward multiplies with (blocks, its k experts a MoE layer, and
  // the LM head).
  double matmul_params() const {
    return double(layers) * double(block_matrix_params) + experts.active_params +
           double(vocab) * double(d_model);
  }
  // K and V of one token in every layer, in elements.
  int64_t kv_elements_per_token() const { return 2 * layers * kv_heads * head_dim; }
};

// The geometry of a tessel model: built shape-only on the meta device through the family
// interface (nothing allocated); d_ff is the widest dimension of the first block's matrices (a
// mixture of experts: or the experts' width, if wider).
ServeShape serve_shape(const models::ModelConfig& config);

enum class ServePhase { Prefill, Decode };
std::string_view serve_phase_name(ServePhase p);

enum class FfnLayout { WeightStationary1D, WeightStationary2D, WeightGathered };
std::string_view ffn_layout_name(FfnLayout l);  // "1d-ws", "2d-ws", "wg"

enum class AttentionSharding { Heads, Batch };
std::string_view attention_sharding_name(AttentionSharding a);

struct ServeLayout {
  FfnLayout ffn = FfnLayout::WeightStationary1D;
  AttentionSharding attention = AttentionSharding::Heads;
  int tp = 1;  // chips of one stage (the paper's n)
  int x = 1;   // 2D weight-stationary: chips along d_model (X); d_ff is over tp / x
  int pp = 1;  // pipeline stages (tessel's --pp), each a group of tp chips
  int ep = 1;  // a mixture of experts: ep groups of tp chips, the experts spread over them
  int chips() const { return ep * tp * pp; }
  // What `tessel serve` runs: 1D weight-stationary, heads-sharded attention, any tp and pp.
  bool runnable() const {
    return ffn == FfnLayout::WeightStationary1D && attention == AttentionSharding::Heads;
  }
  std::string describe() const;  // "1d-ws tp=2 pp=1 attn=heads"
};

struct ServeWorkload {
  ServePhase phase = ServePhase::Decode;
  int64_t batch = 1;        // sequences in the step (all pipeline groups together)
  int64_t prompt = 1;       // prefill: tokens per prompt
  int64_t context = 1;      // decode: tokens already in each sequence's cache (the step attends to
                            // context + 1 positions); prefill: unused
  int64_t kv_capacity = 0;  // tokens of cache held per sequence (memory); 0: the model's context
  int weight_bytes = 4;     // bytes per weight element (4 f32, 2 bf16, 1 int8)
  int kv_bytes = 4;         // bytes per KV element
  int act_bytes = 4;        // bytes per activation element on the wire
  std::string peak_dtype = "f32";  // whose peak the matrix products run at
};

struct ServeCost {
  // Time of the step, split.
  double seconds = 0;  // the step: compute_or_memory + overhead + comm + pipeline
  double compute_seconds = 0, memory_seconds = 0, overhead_seconds = 0;
  double comm_seconds = 0, pipeline_seconds = 0;
  double load_seconds = 0;  // calibrated under load: (the chips' own work) × (1/cpu_share − 1)
  double flops = 0;         // model FLOPs of the step (matmuls and attention), all chips
  double memory_bytes = 0;  // bytes one chip reads and writes from memory in the step
  // Per token.
  double latency_per_token = 0;  // decode: the step; prefill: the step / prompt tokens
  double chip_seconds_per_token = 0;
  double mfu = 0;  // flops / (seconds x chips x peak)
  // Memory of one rank (the largest).
  double weight_bytes_per_rank = 0;
  double kv_bytes_per_token_per_rank = 0;  // one sequence's token, this rank's layers and heads
  double kv_bytes_per_rank = 0;            // batch x kv_capacity tokens
  // Activations and workspace above the weights and the cache: the larger of the prefill's and
  // the last decode step's (plan/serve_memory.h), traced for the layouts tessel runs (the largest
  // stage's under pp), else by formula.
  double workspace_bytes_per_rank = 0;
  bool workspace_traced = false;
  // Traced: what each pipeline stage's ranks hold above their loaded model (their cache and
  // workspace, the allocator's peak a generation of `batch` measures there), stage by stage.
  std::vector<double> stage_above_model_bytes;
  double peak_bytes_per_rank = 0;  // weights + KV cache + workspace
  // Sequences of kv_capacity the device memory holds: with the workspace for the layouts tessel
  // runs, with the cache alone for the others (whose implementation is not tessel's).
  int64_t max_batch = 0;
  bool fits = false;
  std::string reason;  // why not runnable or not feasible, else empty
};

// Elements of weights tensor-parallel rank 0 of `tp` holds, when a layer above the planner can
// apply the runtime's own split to the model built on meta (cli/plan_layout.h); empty: the
// matrices split evenly and everything else replicated.
using TpWeightCount = std::function<int64_t(const models::ModelConfig&, int tp)>;

// The cost of `workload` on `cluster` (which must have layout.chips() devices) under `layout`.
// `tp_weights` (optional, with `config`) counts the weights a 1D rank really holds; `memory`
// (optional) traces a 1D rank's serving memory (plan/serve_memory.h), else the formula is used.
ServeCost serve_cost(const Cluster& cluster, const ServeShape& shape, const ServeLayout& layout,
                     const ServeWorkload& workload, const TpWeightCount& tp_weights = {},
                     const models::ModelConfig* config = nullptr, const ServeMemoryFn& memory = {});

}  // namespace tessel::plan
