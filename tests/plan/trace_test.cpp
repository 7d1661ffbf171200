// SPDX-License-Identifier: Apache-2.0
// The shape-only trace of a training step against hand-derived counts: its matrix-product FLOPs
// against each family's MFU formula (flops_per_token, recompute_flops_per_token), its saved
// activation bytes against a Korthikanti et al. 2022-style count of what tessel's ops keep, and
// the meta device's promise (nothing allocated, data access refused).
#include "tessel/plan/trace.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tessel/autograd/grad_mode.h"
#include "tessel/models/family.h"
#include "tessel/models/gpt2/gpt2_config.h"
#include "tessel/models/llama/llama_config.h"
#include "tessel/tensor/default_device.h"

namespace tessel::plan {
namespace {

using models::ConfigPtr;
using models::ModelConfig;

ConfigPtr gpt2(const std::string& preset) {
  return models::family_named("gpt2").preset(preset);
}
ConfigPtr llama(const std::string& preset) {
  return models::family_named("llama").preset(preset);
}

// Elements of the parameters that are not matrices (biases, norm gains), of the whole model or
// of the modules `only` lists. flops_per_token counts them at 6 FLOPs per token like the matrices
// (PaLM's 6N); the trace counts them where they are used (bias adds, norms), outside matmul_flops.
double vector_parameters(const ModelConfig& config, const std::set<std::string>* only = nullptr) {
  DefaultDeviceScope meta(Device::meta());
  auto model = config.build_empty();
  double n = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    if (p.ndim() >= 2) continue;
    const std::string module = name.substr(0, name.rfind('.'));
    if (only == nullptr || only->contains(module)) n += double(p.numel());
  }
  return n;
}

struct Matmul {
  double gemm = 0, attention = 0;
};
Matmul matmul_flops(const Graph& g, int phase = -1) {
  Matmul m;
  for (const OpNode& op : g.ops) {
    if (phase >= 0 && int(op.phase) != phase) continue;
    if (op.kernel == "gemm") m.gemm += op.cost.matmul_flops;
    if (op.kernel == "attention" || op.kernel == "attention_backward")
      m.attention += op.cost.matmul_flops;
  }
  return m;
}

// A per-token formula f(T) = w + a*T split into its weight part w and attention part a*T.
std::pair<double, double> split_formula(double f_t, double f_t1, int64_t t) {
  const double weights = f_t - double(t) * (f_t1 - f_t);
  return {weights, f_t - weights};
}

// The trace's matrix-product FLOPs equal the MFU formula's, term by term. What the formula counts
// per token (models/*/..._config*.cpp): 6 x every parameter the forward multiplies with (forward
// 2, backward 4; the untied input embedding and GPT-2's position table are looked up, not
// multiplied), and 6 x L x (q width) x T for causal attention (Q K^T and P V, forward 2 x q x T,
// backward twice that: T^2 / 2 visible pairs per head). The trace counts:
//  - GEMMs: 2 m n k each, forward and the two backward products: equal to 6 x the matrices'
//    parameters; biases and norm gains, which the formula's 6N includes, are element-wise work;
//  - attention: 4 D per visible query-key pair forward and 8 D backward over the pairs the causal
//    mask leaves, T (T + 1) / 2 per head, not T^2 / 2: a factor (T + 1) / T on the formula's term.
void expect_flops_match_formula(const ModelConfig& config, int64_t batch, int64_t seq) {
  SCOPED_TRACE(config.summary() + ", B=" + std::to_string(batch) + ", T=" + std::to_string(seq));
  const Graph g = trace_training_step(config, {.batch = batch, .seq = seq});
  const double tokens = double(batch * seq);
  auto [weights, attention] =
      split_formula(config.flops_per_token(seq), config.flops_per_token(seq + 1), seq);
  const Matmul m = matmul_flops(g);
  EXPECT_DOUBLE_EQ(m.gemm, (weights - 6.0 * vector_parameters(config)) * tokens);
  EXPECT_DOUBLE_EQ(m.attention, attention * tokens * double(seq + 1) / double(seq));
  // No other kernel multiplies matrices, and the backward does twice the forward's products.
  EXPECT_DOUBLE_EQ(g.total().matmul_flops, m.gemm + m.attention);
  EXPECT_DOUBLE_EQ(g.phase_total(Phase::Backward).matmul_flops,
                   2.0 * g.phase_total(Phase::Forward).matmul_flops);
  EXPECT_EQ(g.phase_total(Phase::Recompute).ops, 0);
}

TEST(Trace, Gpt2FlopsEqualTheMfuFormula) {
  expect_flops_match_formula(*gpt2("tiny"), 3, 13);
  expect_flops_match_formula(*gpt2("124M"), 3, 13);
  expect_flops_match_formula(*gpt2("124M"), 4, 1024);  // the real shape: free on meta
}

TEST(Trace, LlamaFlopsEqualTheMfuFormula) {
  expect_flops_match_formula(*llama("tiny"), 3, 13);
  expect_flops_match_formula(*llama("smollm-135m"), 1, 33);  // grouped-query, tied embedding
  expect_flops_match_formula(*llama("llama2-7b"), 1, 4096);
}

// GPT-2's saved activations, derived from what each op keeps (ops/*.cpp, autograd::saved), in
// bytes, for N = B T tokens, width C, MLP width I, H heads, L blocks, vocabulary V, f32 values and
// f32 statistics, i64 ids. Per block and token, Korthikanti et al.'s count adapted to tessel:
//   none:      ln_1 input x, ln_1 output (c_attn's input), q, k, v (split copies the attention
//              keeps), the attention output (also c_proj's input), the residual h (ln_2's input),
//              ln_2's output (c_fc's input), c_fc's output and GELU's output (GELU keeps both;
//              c_proj reads the second): 8 C + 2 I values; statistics: mean and rstd of both
//              norms and the attention's log-sum-exp per head: 4 + H. No dropout mask is kept
//              (it is regenerated from its seed) and no T x T matrix (fused attention).
//   selective: the checkpoint keeps x instead of ln_1; ln_1's output, q, k, v, ln_1's
//              statistics and the log-sum-exp are recomputed: 4 C + 2 I values, 2 statistics.
//   full:      only the block input x: C values.
// Outside the blocks: the ids and targets (8 N bytes each), GPT-2's positions (8 T), ln_f's input
// and output (2 C per token) and statistics (2), the logits (V per token) with the loss's
// log-sum-exp (1), and the mean's scale, which keeps its scalar input and output (8 bytes).
double gpt2_saved_bytes(const models::GPT2Config& c, int64_t batch, int64_t seq,
                        nn::Recompute mode) {
  const double n = double(batch * seq), cw = double(c.n_embd), i = double(c.inner());
  double values = 0, stats = 0;
  switch (mode) {
    case nn::Recompute::None:
      values = 8 * cw + 2 * i, stats = 4 + double(c.n_head);
      break;
    case nn::Recompute::Selective:
      values = 4 * cw + 2 * i, stats = 2;
      break;
    case nn::Recompute::Full:
      values = cw, stats = 0;
      break;
  }
  const double blocks = double(c.n_layer) * n * 4 * (values + stats);
  const double outside =
      8 * n * 2 + 8 * double(seq) + n * 4 * (2 * cw + 2) + n * 4 * (double(c.vocab_size) + 1) + 8;
  return blocks + outside;
}

// LLaMA, the same way: per layer and token, input_layernorm's x, its output (q/k/v_proj's one
// input), q and k after RoPE (RoPE itself keeps only tables and positions), v, the attention
// output (o_proj's input), the residual h, post_attention_layernorm's output (gate and up's
// input), gate's output and SiLU's (SiLU keeps both, the product reads the second), up's output
// and the product (down's input): 4 C + 2 q + 2 kv + 4 I values; statistics: the two norms' rstd
// and the log-sum-exp per head (2 + H); the RoPE positions, an i64 per token built per layer.
// Full recompute keeps C values per layer, selective drops the first norm's output and
// statistic, q, k, v, the positions and the log-sum-exp (3 C + q + 4 I values: x, the attention
// output, h, the second norm's output, the MLP's four; and one statistic). Outside: ids and
// targets, the final norm's input and output and its rstd, the logits and the loss's log-sum-exp,
// the 8-byte mean, and the cos / sin tables (R rows of D / 2 f32 each, R = max(T, 256) up to the
// model's context).
double llama_saved_bytes(const models::LlamaConfig& c, int64_t batch, int64_t seq,
                         nn::Recompute mode) {
  const double n = double(batch * seq), cw = double(c.hidden), q = double(c.q_width());
  const double kv = double(c.kv_width()), i = double(c.intermediate_size);
  double values = 0, stats = 0, positions = 0;
  switch (mode) {
    case nn::Recompute::None:
      values = 4 * cw + 2 * q + 2 * kv + 4 * i, stats = 2 + double(c.num_attention_heads);
      positions = 8;
      break;
    case nn::Recompute::Selective:
      values = 3 * cw + q + 4 * i, stats = 1;
      break;
    case nn::Recompute::Full:
      values = cw;
      break;
  }
  const double layers = double(c.num_hidden_layers) * n * (4 * (values + stats) + positions);
  const double rows =
      double(std::min(std::max<int64_t>(c.max_positions(), seq), std::max<int64_t>(seq, 256)));
  // RoPE runs inside the recomputed region under both recompute modes: only `none` keeps them.
  const double tables = mode == nn::Recompute::None ? 2 * rows * double(c.head_dim / 2) * 4 : 0;
  const double outside = 8 * n * 2 + n * 4 * (2 * cw + 1) + n * 4 * (double(c.vocab_size) + 1) + 8;
  return layers + outside + tables;
}

TEST(Trace, Gpt2SavedActivationsEqualTheHandCount) {
  for (const char* preset : {"tiny", "124M"}) {
    const ConfigPtr config = gpt2(preset);
    const auto& c = dynamic_cast<const models::GPT2Config&>(*config);
    for (nn::Recompute mode :
         {nn::Recompute::None, nn::Recompute::Selective, nn::Recompute::Full}) {
      SCOPED_TRACE(std::string(preset) + " " + std::string(nn::recompute_name(mode)));
      const Graph g = trace_training_step(c, {.batch = 3, .seq = 13, .recompute = mode});
      EXPECT_DOUBLE_EQ(g.saved_bytes, gpt2_saved_bytes(c, 3, 13, mode));
    }
  }
}

TEST(Trace, LlamaSavedActivationsEqualTheHandCount) {
  for (const char* preset : {"tiny", "smollm-135m"}) {
    const ConfigPtr config = llama(preset);
    const auto& c = dynamic_cast<const models::LlamaConfig&>(*config);
    for (nn::Recompute mode :
         {nn::Recompute::None, nn::Recompute::Selective, nn::Recompute::Full}) {
      SCOPED_TRACE(std::string(preset) + " " + std::string(nn::recompute_name(mode)));
      const Graph g = trace_training_step(c, {.batch = 3, .seq = 13, .recompute = mode});
      EXPECT_DOUBLE_EQ(g.saved_bytes, llama_saved_bytes(c, 3, 13, mode));
    }
  }
}

// The forward work that recomputation repeats in backward equals the families' HFU formula
// (recompute_flops_per_token), split as above; the vector parameters it counts are those of the
// modules whose ops the trace shows recomputed.
void expect_recompute_matches_formula(const ModelConfig& config, int64_t batch, int64_t seq,
                                      nn::Recompute mode) {
  SCOPED_TRACE(config.summary() + " " + std::string(nn::recompute_name(mode)));
  const Graph g = trace_training_step(config, {.batch = batch, .seq = seq, .recompute = mode});
  const Graph plain = trace_training_step(config, {.batch = batch, .seq = seq});
  std::set<std::string> recomputed;
  for (const OpNode& op : g.ops)
    if (op.phase == Phase::Recompute && op.module >= 0)
      recomputed.insert(g.modules[size_t(op.module)].path);
  auto [weights, attention] = split_formula(config.recompute_flops_per_token(mode, seq),
                                            config.recompute_flops_per_token(mode, seq + 1), seq);
  const double tokens = double(batch * seq);
  const Matmul m = matmul_flops(g, int(Phase::Recompute));
  EXPECT_DOUBLE_EQ(m.gemm, (weights - 2.0 * vector_parameters(config, &recomputed)) * tokens);
  EXPECT_DOUBLE_EQ(m.attention, attention * tokens * double(seq + 1) / double(seq));
  // Recomputation adds work and leaves the forward and backward as they were.
  EXPECT_DOUBLE_EQ(g.phase_total(Phase::Forward).matmul_flops,
                   plain.phase_total(Phase::Forward).matmul_flops);
  EXPECT_DOUBLE_EQ(g.phase_total(Phase::Backward).matmul_flops,
                   plain.phase_total(Phase::Backward).matmul_flops);
}

TEST(Trace, RecomputedFlopsEqualTheHfuFormula) {
  for (nn::Recompute mode : {nn::Recompute::Selective, nn::Recompute::Full}) {
    expect_recompute_matches_formula(*gpt2("124M"), 3, 13, mode);
    expect_recompute_matches_formula(*llama("smollm-135m"), 3, 13, mode);
  }
}

TEST(Trace, RecomputeKeepsLessThanNone) {
  const ConfigPtr c = gpt2("124M");
  auto saved = [&](nn::Recompute mode) {
    return trace_training_step(*c, {.batch = 2, .seq = 33, .recompute = mode}).saved_bytes;
  };
  const double none = saved(nn::Recompute::None), selective = saved(nn::Recompute::Selective);
  const double full = saved(nn::Recompute::Full);
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
}

// Every op belongs to a module (the loss to the root), backward work to the module whose forward
// caused it; blocks of one model cost the same; inclusive sums add up to the root.
TEST(Trace, OpsAreAttributedToTheirModules) {
  const Graph g = trace_training_step(*gpt2("tiny"), {.batch = 3, .seq = 13});
  std::map<std::string, int> index;
  for (size_t i = 0; i < g.modules.size(); ++i) index[g.modules[i].path] = int(i);
  ASSERT_TRUE(index.contains("h.0.mlp.c_fc"));
  const std::vector<Cost> self = g.module_costs(false);
  const std::vector<Cost> inclusive = g.module_costs(true);
  EXPECT_DOUBLE_EQ(inclusive[0].flops, g.total().flops);
  EXPECT_EQ(inclusive[0].ops, int64_t(g.ops.size()));
  // c_fc: one forward GEMM (bias folded in or added), two backward GEMMs (dX, dW).
  const std::vector<Cost> fwd = g.module_costs(false, int(Phase::Forward));
  const std::vector<Cost> bwd = g.module_costs(false, int(Phase::Backward));
  const int fc = index.at("h.0.mlp.c_fc");
  const double mnk = 3.0 * 13 * 192 * 768;
  EXPECT_DOUBLE_EQ(fwd[size_t(fc)].matmul_flops, 2 * mnk);
  EXPECT_DOUBLE_EQ(bwd[size_t(fc)].matmul_flops, 4 * mnk);
  EXPECT_GT(self[size_t(fc)].ops, 0);
  for (const char* block : {"h.1", "h.2", "h.3"})
    EXPECT_EQ(inclusive[size_t(index.at(block))], inclusive[size_t(index.at("h.0"))]) << block;
  for (const OpNode& op : g.ops) EXPECT_GE(op.module, 0) << op.kernel;
}

// Each op's inputs come from earlier ops or from leaves (parameters, the batch); the forward
// chains: every forward op after the first few reads something an earlier op wrote.
TEST(Trace, EdgesPointBackwards) {
  const Graph g = trace_training_step(*llama("tiny"), {.batch = 2, .seq = 7});
  int64_t linked = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    ASSERT_EQ(g.ops[i].producers.size(), g.ops[i].inputs.size());
    bool any = false;
    for (int64_t p : g.ops[i].producers) {
      EXPECT_LT(p, int64_t(i));
      any = any || p >= 0;
    }
    linked += any;
  }
  EXPECT_GT(double(linked), 0.9 * double(g.ops.size()));
}

// Nothing is allocated on the host: not even for GPT-2 124M's full-length step.
TEST(Trace, AllocatesNothing) {
  const size_t before = cpu_allocator().bytes_in_use();
  cpu_allocator().reset_peak();
  const Graph g = trace_training_step(*gpt2("124M"), {.batch = 8, .seq = 1024});
  EXPECT_EQ(cpu_allocator().bytes_in_use(), before);
  EXPECT_EQ(cpu_allocator().peak_bytes(), before);
  EXPECT_GT(g.saved_bytes, 1e9);  // what it would have kept: gigabytes
  EXPECT_EQ(g.parameter_count, gpt2("124M")->parameter_count());
}

// Autocast halves the weight and activation traffic of the matrix products and changes no FLOP.
TEST(Trace, AutocastKeepsFlopsAndShrinksBytes) {
  const ConfigPtr c = gpt2("tiny");
  const Graph f32 = trace_training_step(*c, {.batch = 3, .seq = 13});
  const Graph bf16 = trace_training_step(*c, {.batch = 3, .seq = 13, .compute_dtype = DType::BF16});
  EXPECT_DOUBLE_EQ(bf16.total().matmul_flops, f32.total().matmul_flops);
  EXPECT_LT(bf16.saved_bytes, f32.saved_bytes);
  double gemm_bytes_f32 = 0, gemm_bytes_bf16 = 0;
  for (const OpNode& op : f32.ops)
    if (op.kernel == "gemm") gemm_bytes_f32 += op.cost.bytes_read;
  for (const OpNode& op : bf16.ops)
    if (op.kernel == "gemm") gemm_bytes_bf16 += op.cost.bytes_read;
  EXPECT_DOUBLE_EQ(gemm_bytes_bf16, gemm_bytes_f32 / 2);
}

TEST(Trace, RejectsBadOptions) {
  const ConfigPtr c = gpt2("tiny");
  EXPECT_THROW(trace_training_step(*c, {.batch = 0, .seq = 13}), Error);
  EXPECT_THROW(trace_training_step(*c, {.batch = 1, .seq = 257}), Error);
  EXPECT_THROW(trace_training_step(*c, {.batch = 1, .seq = 7, .compute_dtype = DType::I32}), Error);
}

}  // namespace
}  // namespace tessel::plan
