#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Mixture-of-experts models under pipeline parallelism, alone and with expert parallelism, equal
one rank: `mpirun -np N tessel train --pp 2 [--ep 2]` against `tessel train` with the same global
batch (grad_accum = dp x micro-batches). Each MoE block's auxiliary loss is added to the backward
of the stage where it arises (the stage's output carries it), and each stage's MoE layers use the
ep and expert-dp groups of that stage. The model, data and checks are train.ep_equivalence's (a
GPT-2-MoE whose two blocks are MoE, one per stage, capacity drops; here with dropout 0.1 on the
embeddings and the attention and MoE outputs, whose masks follow each row's place in the step, so
every layout draws one rank's): every step's loss within 1e-5
(relative), the same per-layer loads and drops (each layer's figures come from its own stage), the
same mean auxiliary loss, the final parameters within 1e-5, and under ep the step's all-to-all
bytes over every rank of every stage as docs/MOE.md's formula and its calls over the stages of one
replica as without pp. Layouts: pp 2 GPipe (np 2); ep 2 x pp 2 GPipe and 1F1B (np 4: dp 2); ep 2 x
pp 2 1F1B with ZeRO-3 (the experts' units over their expert group inside each stage). A
checkpoint of ep 2 x pp 2 resumes on one rank and continues the trajectory.

With `mixtral` as the last argument the model is a Mixtral of the same width, depth and expert
count (SwiGLU experts, renormalised top-2 gates, no capacity, grouped-query attention, RoPE), with
the same checks but no drops to expect, at ep 2 x pp 2 1F1B and ep 2 x pp 2 GPipe with ZeRO-3.

Every run takes batch-invariant products (TESSEL_BATCH_INVARIANT=1): a row's GEMM then does not
depend on the other rows, whose count differs between a stage's micro-batch and one rank's
(ep_zero_equivalence.py's docstring). Without them, with the avx2 kernel set and oneDNN limited
to AVX2 (as on a CPU without AVX-512), ep 2 x pp 2 GPipe drifted to 1.27e-5 at step 7; with them
it stays within 2.5e-8.

With `fp16` the GPT-2-MoE trains at train.precision=fp16 from a loss scale its gradients overflow
(2^18, window 4) on the same two layouts against one rank at fp16: every step's overflow, skip and
loss scale as one rank's, the steps up to the first update exactly equal (loss, routing) and
their auxiliary losses within 1e-6 (each stage's routers stay f32 like one rank's; 16-bit routers
were 4e-4 off), ep_zero_equivalence.py's fp16 bounds after them, and the all-to-all bytes as the
formula with 2-byte rows (half of f32's per kept row).

Usage: ep_pp_equivalence.py TESSEL MPIRUN WORKDIR [mixtral|fp16]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, compare_params, fail, final_params, mpi_prefix,  # noqa: E402
                         prepare_workdir, run, seed_resume, single_thread_env, step_records,
                         train_sets, write_json)
from ep_equivalence import (EMBD, EXPERTS, LAYERS, MICRO, SEQ, STEPS, check_routing,  # noqa: E402
                            moe_config)
from ep_zero_equivalence import check_loss_scaling, relative_distance  # noqa: E402

MICRO_BATCHES = 2  # per pipeline step
DROPOUT = 0.1  # GPT-2-MoE's resid_pdrop and embd_pdrop


def check_aux(ref_dir, dir_, what):
    """The step's mean auxiliary loss (every layer's, from its stage) as one rank reports it."""
    worst = 0.0
    for a, b in zip(step_records(ref_dir), step_records(dir_), strict=True):
        rel = abs(a["aux_loss"] - b["aux_loss"]) / abs(a["aux_loss"])
        if rel > 1e-5:
            fail(f"{what}: step {a['step']} aux_loss {b['aux_loss']} vs one rank {a['aux_loss']}")
        worst = max(worst, rel)
    return worst


def check_all_to_all(dir_, dp, what, elem=4):
    """docs/MOE.md's formula summed over every rank of every stage: each MoE layer runs on one
    stage, whose dp ranks each exchange 8 E bytes of counts per micro-batch, and every kept row
    crosses in the dispatch and combine forward and backward (4 x elem bytes x n_embd: 2-byte rows
    under fp16, half of f32's). The calls are
    one data-parallel replica's over every stage: 5 per MoE layer and micro-batch, as without pp
    (rank 0's own count would miss the layers of the other stage)."""
    for r in step_records(dir_):
        kept = sum(sum(e["tokens_per_expert"]) for e in r["experts"])
        want = dp * MICRO_BATCHES * LAYERS * 8 * EXPERTS + 4 * elem * EMBD * kept
        if r["all_to_all_bytes"] != want:
            fail(f"{what}: step {r['step']} all-to-all bytes {r['all_to_all_bytes']} (all ranks, "
                 f"all stages); the formula gives {want} ({kept} kept rows, {elem}-byte "
                 "elements)")
        calls = 5 * MICRO_BATCHES * LAYERS
        if r["all_to_all_calls"] != calls:
            fail(f"{what}: step {r['step']} reports {r['all_to_all_calls']} all-to-all calls; one "
                 f"replica makes {calls} (5 x {MICRO_BATCHES} micro-batches x {LAYERS} MoE layers "
                 "over its stages)")


def mixtral_config(vocab):
    """A Mixtral of train.ep_equivalence's shape: 2 layers (one per stage) of EXPERTS SwiGLU
    experts, top-2 renormalised gates, no capacity, GQA (6 heads over 2 KV heads), RoPE."""
    return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": vocab,
            "hidden_size": EMBD, "intermediate_size": 33, "num_hidden_layers": LAYERS,
            "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 32,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_local_experts": EXPERTS,
            "num_experts_per_tok": 2, "sliding_window": None, "router_aux_loss_coef": 0.01,
            "tie_word_embeddings": False}


def check_fp16(ref, d, f32, what):
    """fp16 at ep 2 x pp 2 against one rank at fp16 (REF; F32: one rank at f32): the same overflow
    skips and loss scales, the steps up to the first update (the initial weights) exactly equal,
    ep_zero_equivalence.py's bounds after them. Returns a line of figures."""
    a, b = step_records(ref), step_records(d)
    skips = check_loss_scaling(a, b, what)
    same = next(i for i, x in enumerate(a) if not x["skipped"]) + 1
    for x, y in zip(a[:same], b[:same]):
        for key in ("loss", "experts"):
            if x[key] != y[key]:
                fail(f"{what}: step {x['step']} (the initial weights) {key} {y[key]!r} vs one "
                     f"rank's {x[key]!r}")
        # The stages' f32 auxiliary losses add in another order than one rank's blocks; a 16-bit
        # router would be off by ~1e-4.
        if abs(x["aux_loss"] - y["aux_loss"]) > 1e-6 * x["aux_loss"]:
            fail(f"{what}: step {x['step']} (the initial weights) aux_loss {y['aux_loss']!r} vs "
                 f"one rank's {x['aux_loss']!r}")
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
    if worst > 1e-3:
        fail(f"{what}: a loss differs from one rank's fp16 run by {worst:.2e} (relative) > 1e-3")
    pr = final_params(ref, STEPS)
    dist, gap = relative_distance(pr, final_params(d, STEPS)), relative_distance(final_params(f32, STEPS), pr)
    if dist > 0.5 * gap:
        fail(f"{what}: final parameters {dist:.2e} from one rank's fp16 run, more than half the "
             f"{gap:.2e} between one rank's fp16 and f32 runs")
    return (f"steps 1-{same} equal to one rank's fp16 run (loss, routing), {skips} "
            f"overflow skips and every loss scale as one rank's, losses within {worst:.1e}, final "
            f"parameters {dist:.1e} from it (fp16 vs f32: {gap:.1e})")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    mode = sys.argv[4] if len(sys.argv) > 4 else None
    if mode not in (None, "mixtral", "fp16"):
        fail(f"mode {mode!r}: expected mixtral or fp16")
    mixtral, fp16 = mode == "mixtral", mode == "fp16"
    vocab = prepare_workdir(tessel, work)
    # GPT-2-MoE with dropout on (embeddings, attention and MoE outputs): the masks are keyed by
    # each row's place in the step, so a rank's micro-batch draws what one rank's accumulated
    # micro-batch of the same rows draws (docs/PARALLEL.md, "Dropout"). Mixtral has none.
    config = write_json(os.path.join(work, "config.json"),
                        mixtral_config(vocab) if mixtral else
                        moe_config(vocab, resid_pdrop=DROPOUT, embd_pdrop=DROPOUT))
    # Row-invariant products (the docstring): fp16's initial weights equal exactly, and f32's
    # 1e-5 does not rest on which kernel the CPU picks for a GEMM's row count.
    env = dict(single_thread_env(), TESSEL_BATCH_INVARIANT="1")
    mpi = mpi_prefix(mpirun)

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["checkpoint.interval=6", f"train.micro_batch={MICRO}",
                                             "log.jsonl=train.jsonl", "checkpoint.dir=" + d] +
                                      precision + list(extra))

    # fp16: ep_zero_equivalence.py's loss scaling, from 2^18 (the first steps overflow), window 4.
    precision = (["train.precision=fp16", f"train.loss_scale_init={2 ** 18}",
                  "train.loss_scale_window=4"] if fp16 else [])
    refs = {}
    for accum in ((4,) if mode else (2, 4)):
        refs[accum] = os.path.join(work, f"one_rank_accum{accum}")
        run([tessel] + common(refs[accum], [f"train.grad_accum={accum}"]), env=env)
    if not mixtral:  # the masks are applied: one rank without dropout trains otherwise
        plain = write_json(os.path.join(work, "config_no_dropout.json"), moe_config(vocab))
        nodrop = os.path.join(work, "one_rank_accum4_no_dropout")
        run([tessel] + [a.replace(config, plain) for a in common(nodrop, ["train.grad_accum=4"])],
            env=env)
        if step_records(nodrop)[0]["loss"] == step_records(refs[4])[0]["loss"]:
            fail(f"dropout {DROPOUT} left one rank's step-1 loss unchanged: no mask was applied")
    if fp16:
        f32 = os.path.join(work, "one_rank_accum4_f32")
        run([tessel] + common(f32, ["train.grad_accum=4", "train.precision=fp32"]), env=env)

    layouts = [(2, [], "gpipe", 0), (4, ["--ep", "2"], "gpipe", 0), (4, ["--ep", "2"], "1f1b", 0),
               (4, ["--ep", "2"], "1f1b", 3)]
    if mode:  # Mixtral never drops: the routing check compares the loads alone
        layouts = [(4, ["--ep", "2"], "1f1b", 0), (4, ["--ep", "2"], "gpipe", 3)]
    dirs = {}
    for ranks, flags, schedule, stage in layouts:
        what = f"np {ranks} --pp 2 {' '.join(flags)} {schedule} ZeRO-{stage}".replace("  ", " ")
        d = dirs[(ranks, schedule, stage)] = os.path.join(
            work, f"np{ranks}_pp2_{'ep2_' if flags else ''}{schedule}_zero{stage}")
        out = run(mpi + ["-np", str(ranks), tessel] + common(d, [f"parallel.zero_stage={stage}"]) +
                  ["--pp", "2", "--dp", str(ranks // 2), "--schedule", schedule,
                   "--microbatches", str(MICRO_BATCHES)] + flags, env=env).stdout
        if "pipeline: " not in out or (flags and "expert parallel: ep = " not in out):
            fail(f"{what}: the run did not report its pipeline and expert parallelism\n{out[-2000:]}")
        ref = refs[MICRO_BATCHES * ranks // 2]
        if fp16:
            check_all_to_all(d, ranks // 2, what, elem=2)
            print(f"{what} fp16: {check_fp16(ref, d, f32, what)}; all-to-all bytes as the formula "
                  "with 2-byte rows")
            continue
        worst = compare_losses(ref, d, what, STEPS)
        drops = check_routing(ref, d, what, need_drops=not mixtral)
        aux = check_aux(ref, d, what)
        if flags:
            check_all_to_all(d, ranks // 2, what)
        worst_p, name, worst_t = compare_params(final_params(ref, STEPS), final_params(d, STEPS), what)
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank, the same routing "
              f"({drops} pairs dropped in all), auxiliary losses within {aux:.1e}, final "
              f"parameters within {worst_p:.1e} (worst {name} {worst_t:.1e})")
    if mode:
        return

    d = os.path.join(work, "resume_ep2_pp2_on_one_rank")
    seed_resume(dirs[(4, "1f1b", 0)], "step_000006", d)
    run([tessel, "train", "--resume", d], env=env)
    compare_losses(refs[4], d, "resume ep 2 x pp 2 -> one rank", STEPS)
    compare_params(final_params(refs[4], STEPS), final_params(d, STEPS), "resume ep 2 x pp 2 -> one rank")
    print("resume ep 2 x pp 2 -> one rank: continues the trajectory (losses and final parameters "
          "within 1e-5)")


if __name__ == "__main__":
    main()
