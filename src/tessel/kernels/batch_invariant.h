// SPDX-License-Identifier: Apache-2.0
// Batch-invariant matrix products: a process-wide mode in which the CPU backend computes every
// output element of the products inference runs (Backend::gemm with A row-major and B transposed,
// i.e. the Linear forward x W^T and the LM head, in f32 / bf16 / f16; Backend::quant_matmul)
// with one fixed reduction order that depends only on k and the kernel set, never on m, n, the
// tiling, the thread count or the other rows. A serving engine that packs the tokens of all its
// running requests into one ragged [N, C] batch needs this: a request's tokens and logprobs must
// not change with what else is in the batch. The libraries' kernels (oneDNN, OpenBLAS) pick
// different code and K blocking per shape, so their rows differ in the last bits between a
// 1-row and a 300-row product. docs/SERVING.md ("Batch-invariant matrix products") has the
// design and its cost; the idea follows Thinking Machines' "Defeating Nondeterminism in LLM
// Inference" (He et al. 2025).
#pragma once

namespace tessel::kernels {

// Whether batch-invariant products are on. Starts as TESSEL_BATCH_INVARIANT (1/on/true or
// 0/off/false; unset: off; any other value is an Error on first use).
bool batch_invariant();
// Turns the mode on or off for the whole process (every thread, every backend call after it).
void set_batch_invariant(bool on);

// Sets the mode for a scope and restores the previous setting when it ends:
//   { kernels::BatchInvariantScope invariant; engine.step(); }
class BatchInvariantScope {
 public:
  explicit BatchInvariantScope(bool on = true);
  ~BatchInvariantScope();
  BatchInvariantScope(const BatchInvariantScope&) = delete;
  BatchInvariantScope& operator=(const BatchInvariantScope&) = delete;

 private:
  bool previous_;
};

}  // namespace tessel::kernels
