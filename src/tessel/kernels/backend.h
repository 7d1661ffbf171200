// SPDX-License-Identifier: Apache-2.0
// Backend: the table of kernels for one device kind (ggml's backend interface, flashlight's
// TensorBackend). Ops above call the backend of their inputs' device; the CPU and CUDA backends
// implement the same interface, and the fp64 reference backend (kernels/reference, tests only)
// is the oracle every other backend is checked against.
//
// Conventions for every kernel:
// - all tensors are contiguous; the caller allocates outputs with the documented shapes/dtypes;
// - outputs are overwritten, except where a kernel says it accumulates;
// - "rows" means all leading dims flattened: a [B, T, C] input is B*T rows of C;
// - kernels validate what the caller cannot (index ranges) and throw Error naming the op;
// - saved statistics (mean, rstd, lse, per-row losses) and AdamW moments are "stat" tensors:
//   f64 when the inputs are f64, f32 otherwise (stat_dtype()).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "tessel/kernels/quant/quant_format.h"
#include "tessel/tensor/tensor.h"

namespace tessel::kernels {

enum class Op {
  Gemm,
  Unary,
  UnaryBackward,
  Binary,
  Reduce,
  Softmax,
  SoftmaxBackward,
  LayerNorm,
  LayerNormBackward,
  RmsNorm,
  RmsNormBackward,
  Embedding,
  EmbeddingBackward,
  Attention,
  AttentionBackward,
  CrossEntropy,
  CrossEntropyBackward,
  AdamW,
  Dropout,
  Rope,
  SquareSum,
  QuantMatmul,
  PagedKvStore,
  PagedAttention,
  GroupedGemm,
};
std::string_view op_name(Op op);

// Elements per block of Backend::square_sums.
inline constexpr int64_t kSquareSumBlock = int64_t(1) << 13;

inline DType stat_dtype(DType input) {
  return input == DType::F64 ? DType::F64 : DType::F32;
}

enum class UnaryOp {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Abs,
  Square,
  Tanh,
  Sigmoid,
  Relu,
  Gelu,   // tanh approximation, as GPT-2 and HF "gelu_new": 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
  Silu,   // x * sigmoid(x)
  Scale,  // alpha * x
  AddScalar,  // x + alpha
  Pow,        // x ^ alpha
};
std::string_view unary_name(UnaryOp op);
// Whether op's derivative is computed from y = f(x) (exp, sqrt, rsqrt, tanh, sigmoid) rather than
// from x: unary_backward then reads y's values and x's only for its shape.
bool unary_derivative_reads_y(UnaryOp op);

enum class BinaryOp { Add, Sub, Mul, Div, Max, Min };
std::string_view binary_name(BinaryOp op);

enum class ReduceOp { Sum, Mean, Max, Min };
std::string_view reduce_name(ReduceOp op);

// C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for i < batch, all row-major.
// op(A) is m x k (A stored k x m when trans_a), op(B) is k x n (B stored n x k when trans_b).
// ld* are row strides in elements; stride_* step between batch entries (0: shared by all).
// Element offsets are relative to each tensor's data pointer.
struct GemmDesc {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;
};
// A GemmDesc for densely packed operands: a is [batch?, m, k] (or [k, m] when trans_a), b is
// [batch?, k, n] (or [n, k]); stride_b = 0 when b has no batch dim.
GemmDesc dense_gemm_desc(int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
                         bool b_batched = true);

// Fused multi-head attention over q [B, Tq, H, D], k and v [B, Tk, Hkv, D] (Hkv divides H:
// multi-query / grouped-query attention), out [B, Tq, H, D], lse [B, H, Tq] (stat: the log-sum-exp
// of each row's scaled scores, saved for backward). With `causal`, query i sits at absolute
// position p = i + (Tk - Tq) and sees keys j <= p, so a decode step with a KV cache is causal too.
// `window` > 0 (causal only; Mistral's sliding window, as Hugging Face masks it) narrows that to
// p - window < j <= p: at most `window` keys, the query's own included; 0 = unlimited, and a window
// >= Tk is the same as none. `mask` (optional, i8 [B, Tk], 1 = attend) hides padded keys. A row
// that sees no key yields 0 and lse = -inf.
struct AttentionDesc {
  int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = true;
  double scale = 0.0;  // usually 1/sqrt(head_dim)
  int64_t window = 0;  // sliding window (keys per query, itself included); 0 = unlimited
};

// Paged attention (PagedAttention, Kwon et al. 2023) over a block-paged KV cache: pools k_pool and
// v_pool [num_blocks, block_size, Hkv, D]; key position t of sequence s lives at slot
// block_tables[s][t / block_size] * block_size + t % block_size (a slot indexes the pool's
// [num_blocks * block_size] rows). `scale` 0 means 1/sqrt(D); `window` as AttentionDesc's.
struct PagedAttentionDesc {
  double scale = 0.0;
  int64_t window = 0;
};

// Grouped GEMM (GShard / MegaBlocks: the experts of a mixture-of-experts layer, each multiplying
// only the tokens routed to it, with no padding to a capacity). The M rows of `a` form G contiguous
// groups given by offsets (i64 [G + 1]: offsets[0] = 0, non-decreasing, offsets[G] = M); group g
// owns rows [offsets[g], offsets[g + 1]), and may be empty. Two forms:
// - rows (weight_grad false): c[r, :] = a[r, :] @ op(b[g]) for every row r of group g, with a
//   [M, K], b [G, K, N] ([G, N, K] with trans_b: each group's nn.Linear weight) and c [M, N].
//   The forward product and the input gradient.
// - weight gradient (weight_grad true): c[g] = a[rows of g]^T @ b[rows of g], with a [M, P],
//   b [M, Q] and c [G, P, Q]; an empty group's c[g] is zero.
struct GroupedGemmDesc {
  bool trans_b = false;
  bool weight_grad = false;
};

struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;  // 1-based; used for bias correction
};

// Which tensors AdamW decays, as GPT-2 recipes (nanoGPT, Megatron) do: matrices and embeddings,
// never biases or norm gains; the dimension count tells them apart without name patterns. One rule
// for every optimizer that shards or replicates the moments.
inline bool adamw_decays(const Shape& shape) {
  return shape.ndim() >= 2;
}

// Refuses (tessel::Error naming `who`) betas outside [0, 1), a negative or non-finite eps or weight
// decay: the one check of AdamW's hyperparameters for every optimizer built on the kernel.
void check_adamw_hyperparameters(std::string_view who, double beta1, double beta2, double eps,
                                 double weight_decay);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual bool supports(Op op, DType dtype) const = 0;

  virtual void gemm(const GemmDesc& desc, const Tensor& a, const Tensor& b, Tensor& c) = 0;

  // y = f(x); alpha parameterises Scale / AddScalar / Pow.
  virtual void unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha = 0.0) = 0;
  // dx = dy * f'(x) (y = f(x) is given too, for ops whose derivative is cheaper from it).
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                              Tensor& dx, double alpha = 0.0) = 0;
  // out = a (op) b with NumPy broadcasting; out has the broadcast shape.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // Reduces x over `dims`; out has x's shape with those dims set to 1 (keepdim form).
  virtual void reduce(ReduceOp op, const Tensor& x, std::span<const int> dims, Tensor& out) = 0;

  // Softmax (or log-softmax) over the last dim.
  virtual void softmax(const Tensor& x, Tensor& y, bool log) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) = 0;

  // LayerNorm over the last dim C: y = (x - mean) * rstd * weight + bias. weight/bias [C] may be
  // undefined (no affine). mean and rstd are stat tensors [rows], saved for backward.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          Tensor& y, Tensor& mean, Tensor& rstd) = 0;
  // dweight / dbias (when defined) are overwritten with this call's gradient.
  virtual void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                   Tensor& dweight, Tensor& dbias) = 0;
  // RMSNorm over the last dim: y = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps).
  virtual void rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y,
                        Tensor& rstd) = 0;
  virtual void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                 const Tensor& rstd, Tensor& dx, Tensor& dweight) = 0;

  // out[n, :] = weight[ids[n], :]; ids i32 or i64 [N], weight [V, C], out [N, C].
  virtual void embedding(const Tensor& weight, const Tensor& ids, Tensor& out) = 0;
  // dweight[ids[n], :] += dout[n, :] (accumulates; repeated ids add up).
  virtual void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) = 0;

  virtual void attention(const AttentionDesc& desc, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& mask, Tensor& out, Tensor& lse) = 0;
  virtual void attention_backward(const AttentionDesc& desc, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& mask, const Tensor& out,
                                  const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                                  Tensor& dv) = 0;

  // Per-row loss of softmax cross-entropy: logits [N, V], targets i32/i64 [N], losses [N] and
  // lse [N] are stat tensors. Rows whose target is ignore_index get loss 0.
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             Tensor& losses, Tensor& lse) = 0;
  // dlogits = dlosses[n] * (softmax(logits[n]) - onehot(target[n])); zero on ignored rows.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& dlosses,
                                      int64_t ignore_index, Tensor& dlogits) = 0;

  // One decoupled-weight-decay Adam step (Loshchilov & Hutter 2019) on param in place, with
  // moments m and v (f32) updated in place.
  virtual void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                     const AdamWParams& params) = 0;

  // y = x * keep / (1 - p) with keep_i = uniform_at(seed, offset, i) >= p. The mask is never
  // stored: backward regenerates it from (seed, offset).
  virtual void dropout(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset) = 0;

  // Rotary position embedding (Su et al. 2021, RoFormer) in the Hugging Face "rotate_half" layout
  // of Llama, Mistral and Qwen2. x and out [B, T, H, D] with D even; cos and sin [P, D/2] (stat
  // dtype: the tables of cos / sin(position * inv_freq)); positions i32 or i64 [B, T], each in
  // [0, P) (checked: an Error names the first one outside). Each head vector x of token (b, t),
  // halves x1 = x[:D/2] and x2 = x[D/2:], with c = cos[positions[b, t]], s = sin[...]:
  //   out1 = x1 * c - x2 * s,   out2 = x2 * c + x1 * s.
  // `inverse` rotates by the opposite angle (s -> -s); that is the backward pass: dx =
  // rope(dy, inverse). out may be x itself (in place).
  virtual void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
                    bool inverse, Tensor& out) = 0;

  // Multi-tensor sums of squares with f64 accumulation: out[i] = sum_j xs[i][j]^2, for contiguous
  // floating tensors of any dtypes (the gradient norm reads every gradient, bucket and shard this
  // way). Each tensor is summed in blocks of kSquareSumBlock elements added in block order, so the
  // value is the same for every thread count (a norm must not depend on how a run is threaded).
  virtual void square_sums(std::span<const Tensor> xs, std::span<double> out) = 0;

  // y[m, n] = x[m, k] W[n, k]^T for a weight W stored in a GGUF weight format (quant/
  // quant_format.h: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, F16, BF16) or as tessel's Int8 rows, read in
  // place: w is an i8 tensor [n, row_bytes(type, k)] holding ggml's blocks exactly as a GGUF file
  // stores them; x [m, k] and y [m, n] are f32 (f64 on the reference backend, which multiplies
  // the exactly dequantized weights). For the Q types and Int8 the CPU backend rounds each
  // 32-element block of x to int8 with its own scale (as ggml's Q8_0) and multiplies in integers;
  // F16 / BF16 weights multiply in f32.
  virtual void quant_matmul(quant::QuantType type, const Tensor& x, const Tensor& w, Tensor& y) = 0;

  // The layout this backend's kernels read a `type` matrix fastest in: `type` itself, or a layout
  // of tessel's own with the same values that quant_matmul also takes (the CPU backend: Q4_0 ->
  // Q4_0x4 where its 512-bit decode rows run, quant/q4_0_groups.h; Q4_K, Q5_K, Q6_K, Q8_0 ->
  // their rows interleaved by block, quant/row_interleave.h). Models converted for
  // inference take it (models/inference_weights.h); a matrix in either layout gives the same
  // outputs, bit for bit.
  virtual quant::QuantType quant_layout(quant::QuantType type) const { return type; }

  // Writes the keys and values of N new tokens into the paged pools: k_pool[slot[i]] = k[i] and
  // v_pool[slot[i]] = v[i] for k, v [N, Hkv, D], pools [num_blocks, block_size, Hkv, D] of the
  // same dtype and slots i64 [N]. Every slot lies in [0, num_blocks * block_size) and no two are
  // equal (checked before anything is written).
  virtual void paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_pool,
                              Tensor& v_pool) = 0;

  // Causal attention of a ragged batch of S sequences whose N new queries are packed: q [N, H, D];
  // block_tables i32 [S, max_blocks] (row s: sequence s's blocks in order; entries past its last
  // block are ignored); seq_lens i64 [S] (keys of sequence s, its new tokens included);
  // query_starts i64 [S + 1] (sequence s owns rows [query_starts[s], query_starts[s + 1]), n_s of
  // them, n_s <= seq_lens[s]). Row j of sequence s sits at position p = seq_lens[s] - n_s + j and
  // sees keys max(0, p - window + 1) .. p (0 .. p without a window); query head h reads kv head
  // h / (H / Hkv). out [N, H, D] has q's dtype; the pools are f64 with f64 q, else any of f32,
  // bf16, f16 (computed in f32). The CPU kernel is batch-invariant: a row's bits depend only on
  // its query, its sequence's keys and values and the options (docs/KERNELS.md).
  virtual void paged_attention(const PagedAttentionDesc& desc, const Tensor& q,
                               const Tensor& k_pool, const Tensor& v_pool,
                               const Tensor& block_tables, const Tensor& seq_lens,
                               const Tensor& query_starts, Tensor& out) = 0;

  virtual void grouped_gemm(const GroupedGemmDesc& desc, const Tensor& a, const Tensor& b,
                            const Tensor& offsets, Tensor& c) = 0;

  // dst = src in dst's dtype (equal element counts; float -> bf16/f16 rounds to nearest even).
  // The default converts element by element on the host; backends override it with fast paths.
  virtual void convert(const Tensor& src, Tensor& dst);
};

// The backend for a device (the CPU backend for Device::cpu()).
Backend& backend_for(Device device);
Backend& cpu_backend();

}  // namespace tessel::kernels
