// SPDX-License-Identifier: Apache-2.0
// Activation recomputation modes of a transformer block, named as `train.recompute` spells them.
// Every family's block implements them; what each mode keeps is the block's own business.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::nn {

// What a block recomputes in backward instead of keeping from forward (activation recomputation,
// through autograd::checkpoint, with dropout masks replayed bit for bit).
//  None: every tensor the block's ops save stays alive until backward.
//  Selective: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
//    Models") recompute the attention core, whose saved tensors are large and cheap to rebuild.
//    tessel's fused attention already keeps no T x T matrix (only its output and the per-row
//    log-sum-exp), so recomputing the core alone would free only the log-sum-exp. Selective here
//    therefore recomputes everything from the block input to the c_proj input: ln_1, the fused
//    QKV projection and the attention core; ln_1's output, the [B, T, 3C] qkv tensor and the
//    log-sum-exp are not kept (4 of the 15 [B, T, C]-sized tensors a GPT-2 block saves) for a
//    quarter of the block's matmul FLOPs plus the attention forward.
//  Full: Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost"): only the block input
//    is kept and the whole block runs again in backward.
// During a recomputation the submodules' hooks and activation observers run a second time, and
// under selective attn's forward hooks see the block input (ln_1 runs inside the region).
enum class Recompute { None, Selective, Full };

std::string_view recompute_name(Recompute mode);
// "none" | "selective" | "full"; anything else is an Error naming the three.
Recompute parse_recompute(std::string_view name);

// `train.recompute` as a list: one mode for every block ("full"), or one per pipeline rank
// ("full,selective,none": rank 0's blocks recompute fully, the last rank's not at all). A
// rank's memory is its own (1F1B keeps pp - r micro-batches in flight on rank r), so the ranks
// that hold the most activations can pay for recomputation while the others run without it.
// An Error names the entry that is not a mode.
std::vector<Recompute> parse_recompute_list(std::string_view spec);
std::string recompute_list_name(const std::vector<Recompute>& modes);  // "full,none"
// Pipeline rank `rank`'s mode of `ranks`: the one mode, or the rank's own; an Error when the
// list has neither 1 nor `ranks` entries.
Recompute recompute_of_rank(const std::vector<Recompute>& modes, int rank, int ranks);

// Finer than a rank: an entry `mode:N` recomputes the first N of its rank's blocks (in forward
// order) with `mode` and none of the others (Megatron-LM's --recompute-method block
// --recompute-num-layers N), so a rank recomputes only as many blocks as its memory needs.
// parse_recompute_list reads such an entry as its mode; parse_recompute_blocks gives each
// entry's N (kAllBlocks for an entry without one), expanded in the same way ("full:2*4" is four
// ranks of full:2). N is a whole number from 1; `none` takes no count.
inline constexpr int64_t kAllBlocks = -1;
std::vector<int64_t> parse_recompute_blocks(std::string_view spec);
// "full:3,none" (runs as `mode:N*R`); `blocks` empty or of modes' length.
std::string recompute_list_name(const std::vector<Recompute>& modes,
                                const std::vector<int64_t>& blocks);

// A stronger mode on some blocks and a weaker one on the others: `mode:N+rest` recomputes the
// rank's first N blocks with `mode` and the others with `rest` ("full:3+selective": the first
// three blocks keep only their inputs, the others drop their attention's inputs), so a rank that
// selective alone does not fit pays full recomputation on as few blocks as its memory needs.
// `+rest` needs a count and a mode other than the entry's own.
// One entry of train.recompute: `mode` on the rank's first `blocks` blocks (every block with
// kAllBlocks), `rest` on the others (none for an entry without `+rest`).
struct RankRecompute {
  Recompute mode = Recompute::None;
  int64_t blocks = kAllBlocks;
  Recompute rest = Recompute::None;
};
// Every entry of `spec`, expanded as parse_recompute_list is; parse_recompute_list and
// parse_recompute_blocks are its modes and its counts.
std::vector<RankRecompute> parse_recompute_entries(std::string_view spec);
// "full:3+selective,none"; `rests` empty or of modes' length (an entry whose rest is none, or
// that has no count, prints none).
std::string recompute_list_name(const std::vector<Recompute>& modes,
                                const std::vector<int64_t>& blocks,
                                const std::vector<Recompute>& rests);
// Pipeline rank `rank` of `ranks`'s entry of `spec`; an Error as recompute_of_rank gives one.
RankRecompute rank_recompute(std::string_view spec, int rank, int ranks);

}  // namespace tessel::nn
