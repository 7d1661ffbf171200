// SPDX-License-Identifier: Apache-2.0
// The two things every architecture gives the rest of tessel: a ModelConfig (the hyper-parameters
// of one model, read from and written to a Hugging Face config.json, with the facts the trainer,
// the pipeline partitioner, the planner and the server ask for) and a CausalLM (the serial module
// built from it). train/, parallel/, serve/ and plan/ see models only through these two and the
// Family (family.h), so a new architecture is one folder in models/ and no edit elsewhere.
//
// Pipeline layering, shared by every family: layer 0 is the input embedding, layers 1..n are the
// repeated blocks, layer n + 1 the final norm and the LM head; forward(ids) computes exactly
// head(block(n-1, ... block(0, embed(ids)))), op for op, so a pipelined step equals one process.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/models/decode_cache.h"
#include "tessel/models/kv_cache.h"
#include "tessel/nn/init.h"
#include "tessel/nn/module.h"
#include "tessel/nn/moe.h"
#include "tessel/nn/recompute.h"

namespace tessel::models {

class CausalLM;
class Family;

// What a KV cache for this model holds per token: layers x kv_heads x head_dim keys and values.
struct KvGeometry {
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  // Keys and values of one token in all layers, in bytes of `element_bytes` each.
  int64_t bytes_per_token(int64_t element_bytes) const {
    return 2 * layers * kv_heads * head_dim * element_bytes;
  }
};

// The data a tensor-parallel run needs from a family (models/ cannot name parallel/ types, so it
// is plain data that parallel::ParallelPlan parses): the plan's JSON text (module-name patterns
// to styles, like configs/gpt2-tp.json), the named sizes the plan's "unit" fields refer to, and
// the vocabulary-parallel embedding that the LM head multiplies with.
struct TensorParallelSpec {
  std::string plan_json;
  std::vector<std::pair<std::string, int64_t>> sizes;  // e.g. {"head_dim", 64}
  std::string vocab_parallel_weight;                   // e.g. "wte.weight"
  // With a tied head (it multiplies with the VocabParallel embedding's rows) the head's input must
  // enter the tensor-parallel region at this module, a norm given Sequence with gather_output;
  // without it the input's gradient is one rank's partial sum. Empty: the head enters itself.
  std::string head_region_entry;  // e.g. "ln_f"
};

class ModelConfig {
 public:
  virtual ~ModelConfig() = default;
  virtual const Family& family() const = 0;

  // config.json text in the Hugging Face layout (architectures and model_type included).
  virtual std::string to_json() const = 0;
  // Range checks across keys; an Error names the key and the value.
  virtual void validate() const = 0;
  // "GPT-2 12 layers x 768 wide, 12 heads" : the model line of the trainer's output.
  virtual std::string summary() const = 0;
  // Whether `other` has the same tensors (names and shapes): resuming or loading across them is
  // safe. Compared by the architecture's own shape fields.
  virtual bool same_shapes(const ModelConfig& other) const = 0;

  // (Named so that a family's config struct can keep the Hugging Face keys as its members.)
  virtual int64_t vocabulary_size() const = 0;
  virtual int64_t max_positions() const = 0;  // the longest sequence the model takes
  virtual int64_t num_layers() const = 0;     // repeated blocks
  virtual int64_t hidden_size() const = 0;
  virtual int64_t num_heads() const = 0;
  virtual int64_t parameter_count() const = 0;  // computed without building the model
  // Whether some block is a mixture of experts (its forward has auxiliary losses to train).
  virtual bool has_experts() const { return false; }
  virtual KvGeometry kv_geometry() const = 0;
  virtual std::optional<int64_t> bos_id() const = 0;
  virtual std::optional<int64_t> eos_id() const = 0;

  // Model FLOPs of a training step per token (forward + backward, the MFU numerator, PaLM's
  // 6N + 12 L C T form with N the parameters the forward multiplies with).
  virtual double flops_per_token(int64_t seq_len) const = 0;
  // The extra forward FLOPs per token that `mode` recomputes in backward (for HFU).
  virtual double recompute_flops_per_token(nn::Recompute mode, int64_t seq_len) const = 0;

  // The built module: random (the family's published initialisation, from `generator`), or
  // shape-only storage that is allocated but never touched (for loading into).
  virtual std::shared_ptr<CausalLM> build_random(Generator& generator) const = 0;
  virtual std::shared_ptr<CausalLM> build_empty(Generator* dropout_generator = nullptr) const = 0;

  // Tensor parallelism over `tp` ranks: an Error when the model cannot be split that way (heads not
  // divisible, an untied head, ...), else the plan and sizes.
  virtual TensorParallelSpec tensor_parallel(int tp) const = 0;
};

// Inference under --tp (generate, serve, their pipeline stages): tensor_parallel(tp)'s checks,
// and for a mixture of experts that every MoE layer's expert FFN width is at least tp: the tp
// loaders split each expert's FFN columns over tp as training's --etp does (docs/MOE.md,
// "Tensor-parallel inference"). One Error naming the layer otherwise.
TensorParallelSpec inference_tensor_parallel(const ModelConfig& config, int tp);

using ConfigPtr = std::shared_ptr<const ModelConfig>;

class CausalLM;
// One rank's recomputation (train.recompute's entry, nn/recompute.h): `mode` on the first `count`
// of `blocks` (the block indices the rank runs, in forward order) and `rest` on every other
// block, or with count nn::kAllBlocks `mode` on every block. An Error when count exceeds
// blocks.size().
void set_rank_recompute(CausalLM& model, nn::Recompute mode, int64_t count,
                        const std::vector<int64_t>& blocks,
                        nn::Recompute rest = nn::Recompute::None);

// What one mixture-of-experts layer routed in the model's last forward: its block index and the
// layer's statistics (tokens per expert, dropped pairs, the auxiliary losses).
struct ExpertLayerStats {
  int64_t layer = 0;
  nn::MoEStats stats;
};

// The bound on one chunk of evaluation logits, counted as f32: 32 MiB, so a GPT-2 sequence of
// 1024 tokens (50257 columns, 196 MiB of f32 logits at once) is scored 166 positions at a time.
inline constexpr int64_t kLossChunkBytes = int64_t(32) << 20;
// Positions per chunk for `batch` rows of `vocab` columns under kLossChunkBytes (at least 1).
int64_t loss_chunk_positions(int64_t batch, int64_t vocab);

class CausalLM : public nn::Module {
 public:
  using nn::Module::Module;

  virtual const ModelConfig& model_config() const = 0;
  // Where the parameters live (nn::move_to_device moves them): the host, or a CUDA device.
  Device device() const;

  // ids i32/i64 [B, T] (T <= max_positions) -> logits [B, T, vocab]: head(blocks(embed(ids))),
  // reported to observers as the module's output. With TESSEL_DUMP_DIR set, each call writes every
  // named intermediate to DIR/activations-NNNN.safetensors for layer-by-layer comparison.
  Tensor forward(const Tensor& ids);
  // Mean cross-entropy of forward(ids) against targets [B, T] (entries -100 are ignored).
  Tensor loss(const Tensor& ids, const Tensor& targets);

  // Evaluation without the [B, T, V] logits (causal_lm_eval_loss.cpp): the embedding and blocks
  // run once, the head on `positions` positions at a time (0: loss_chunk_positions(B, V)), so at
  // most one chunk's logits exist. Inference only: an Error while gradients are recorded.
  // for_each_logits_chunk hands each chunk's logits [B, c, V'] and its first position to `each`;
  // eval_loss equals loss() bit for bit (the same per-token losses, reduced as loss() reduces).
  // With TESSEL_DUMP_DIR set, each call writes the file forward() would (the head's intermediates
  // joined from the chunks), counted with forward()'s.
  // `before_head`, when given, takes the blocks' output [B, T', C] and returns the [B, T, C] the
  // head is run on, in chunks (tensor parallelism's glue gathers a sequence-parallel rank's piece
  // of the positions there, train/model_tensor_parallel.cpp).
  void for_each_logits_chunk(const Tensor& ids, int64_t positions,
                             const std::function<void(const Tensor& logits, int64_t first)>& each,
                             const std::function<Tensor(const Tensor&)>& before_head = {});
  Tensor eval_loss(const Tensor& ids, const Tensor& targets, int64_t positions = 0);

  // Pipeline layering (see the file comment). embed: ids [B, T] -> hidden [B, T, C]; block:
  // hidden -> hidden; head: hidden -> logits [B, T, V'] (V' is the local vocabulary under tensor
  // parallelism).
  virtual Tensor embed(const Tensor& ids) = 0;
  virtual Tensor block(int64_t index, const Tensor& hidden) = 0;
  virtual Tensor head(const Tensor& hidden) = 0;
  int64_t num_layers() const { return model_config().num_layers(); }
  // The pipeline layer (0 .. num_layers() + 1) whose forward uses parameter `name`; a tied
  // parameter belongs to the first layer that uses it. An Error for a name the model lacks.
  virtual int64_t layer_of_parameter(const std::string& name) const = 0;
  // Parameters the head uses although an earlier layer owns them (GPT-2's tied wte.weight).
  virtual std::vector<std::string> head_tied_parameters() const = 0;
  // Module paths of the units of work, in forward order: each block, then the final norm. ZeRO-3
  // gathers a unit's parameters together; the rest (the embeddings) belong to the root.
  virtual std::vector<std::string> unit_paths() const = 0;
  // The cost of each pipeline layer for the partitioner: the weights its forward multiplies with.
  virtual std::vector<double> layer_costs() const = 0;

  // Activation recomputation of every block, or of block `index` (0 .. num_layers() - 1) alone;
  // gradients stay bitwise the same. recompute() is the last mode every block was given.
  virtual void set_recompute(nn::Recompute mode) = 0;
  virtual void set_block_recompute(int64_t index, nn::Recompute mode) = 0;
  virtual nn::Recompute recompute() const = 0;

  // Mixture-of-experts models (nn/moe.h): the sum of the auxiliary losses (load balancing and
  // router z-loss, each weighted by its coefficient) of every MoE layer in the last forward, a
  // scalar the trainer adds to the loss it differentiates; undefined for a dense model. With
  // `expert_stats` the layers' routing of that forward, in block order (empty when dense).
  virtual Tensor auxiliary_loss() const { return Tensor(); }
  // The auxiliary loss of block `block` alone in its last forward (undefined for a dense block):
  // a pipeline stage adds its own blocks' losses to its backward.
  virtual Tensor block_auxiliary_loss(int64_t block) const {
    (void)block;
    return Tensor();
  }
  virtual std::vector<ExpertLayerStats> expert_stats() const { return {}; }

  // Cached decoding: runs ids [B, T] at the positions `cache` gives them against the keys and
  // values it holds, storing the new ones there (through cache.attend); the logits equal the
  // matching rows of forward() on each whole sequence. Inference only. Without `rows` the logits
  // are [B, T, V]; with rows (i64 [R], indices into the B x T tokens in row-major order) only those
  // tokens reach the head: [R, V] (the serving engine needs each sequence's last token).
  virtual Tensor forward_cached(const Tensor& ids, DecodeCache& cache,
                                const Tensor& rows = Tensor()) = 0;
  // forward_cached over a KVCache at positions [cache.length(), cache.length() + T), then
  // cache.advance(T). With `last_only` the logits are [B, 1, V] for the last new position.
  Tensor forward_step(const Tensor& ids, KVCache& cache, bool last_only = false);
  // An empty cache for `batch` sequences of up to `capacity` tokens (0: max_positions), for the
  // heads this model holds (this rank's under tensor parallelism), in the weights' dtype.
  virtual KVCache make_cache(int64_t batch, int64_t capacity = 0) const = 0;
  // Greedy decoding, recomputing the whole sequence at every step (a reference for the cached
  // path); past max_positions the model sees the last max_positions tokens. The new ids only.
  std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt, int64_t steps);

 protected:
  // hidden [B, T, C] -> the tokens `rows` names, [R, C] (hidden itself when rows is undefined).
  static Tensor select_tokens(const Tensor& hidden, const Tensor& rows);

 private:
  // ids checked, then embed and the blocks: the hidden states the head takes.
  Tensor trunk(const Tensor& ids);
  Tensor forward_layers(const Tensor& ids);
  int64_t dump_count_ = 0;
};

}  // namespace tessel::models
