#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Expert parallelism equals one rank: `mpirun -np N tessel train --ep E` (the experts of every
MoE layer split over groups of E data-parallel ranks) against `tessel train` on one rank with one
micro-batch per rank of the parallel run (grad_accum N): capacity and drops are decided per
micro-batch on every layout, so both see the same calls. A GPT-2-MoE with both blocks MoE (4 GELU
experts, top-2, capacity factor 1 so pairs are dropped) on 3 x 13 = 39 tokens per micro-batch.
Every step's loss within 1e-5 (relative), the same routing (tokens per expert and dropped pairs
of every layer, exactly), the final parameters (the checkpoint assembled from the ranks' expert
pieces) within 1e-5; every step's all-to-all calls and bytes as the formula of docs/MOE.md gives
them; a checkpoint of ep 2 resumed at ep 4 and on one rank continues the same trajectory. Bad
layouts (an expert count ep does not divide, --ep not dividing dp, --ep with a dense model) and
bad expert settings under mpirun fail with one clear error.

Usage: ep_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, compare_params, fail, final_params, gpt2_config,  # noqa: E402
                         mpi_prefix, prepare_workdir, run, seed_resume, single_thread_env,
                         step_records, train_sets, write_json)

EXPERTS, TOP_K, LAYERS, EMBD = 4, 2, 2, 24
MICRO, SEQ, STEPS = 3, 13, 12


def moe_config(vocab, **extra):
    cfg = gpt2_config(vocab, n_positions=32, n_embd=EMBD, n_layer=LAYERS, n_head=2)
    cfg.update({"model_type": "gpt2_moe", "architectures": ["GPT2MoELMHeadModel"],
                "num_experts": EXPERTS, "top_k": TOP_K, "moe_every": 1, "capacity_factor": 1.0,
                "z_loss_coef": 0.001})
    cfg.update(extra)
    return cfg


def check_routing(ref_dir, dir_, what, need_drops=True):
    """The same tokens, per-expert loads and drops in every layer of every step (NEED_DROPS: some
    pair must have been dropped, the capacity's test; off for a model without capacity)."""
    drops = 0
    for a, b in zip(step_records(ref_dir), step_records(dir_), strict=True):
        for ea, eb in zip(a["experts"], b["experts"], strict=True):
            for key in ("layer", "tokens", "capacity", "tokens_per_expert", "dropped"):
                if ea[key] != eb[key]:
                    fail(f"{what}: step {a['step']} layer {ea['layer']} {key} {eb[key]} vs one rank {ea[key]}")
            drops += ea["dropped"]
    if drops == 0 and need_drops:
        fail(f"{what}: no pair was dropped in any step; the capacity test needs drops")
    return drops


def check_all_to_all(dir_, ranks, accum_per_rank, what, elem=4):
    """Per MoE layer, micro-batch and rank: one all_to_all of the E expert counts (8 E bytes, i64),
    then dispatch and combine forward and again backward. Over the ranks every kept (token, choice)
    row is in one dispatch input (the sender's) and one combine input (its expert's rank), and the
    backward repeats both with gradients: 4 x elem bytes x n_embd per kept row (elem: 4 for f32,
    2 for bf16/fp16, whose rows travel in 16 bits)."""
    for r in step_records(dir_):
        kept = sum(sum(e["tokens_per_expert"]) for e in r["experts"])
        calls = ranks * accum_per_rank * LAYERS
        want = calls * 8 * EXPERTS + 4 * elem * EMBD * kept
        if r["all_to_all_bytes"] != want or r["all_to_all_calls"] != 5 * accum_per_rank * LAYERS:
            fail(f"{what}: step {r['step']} issued {r['all_to_all_calls']} all-to-alls of "
                 f"{r['all_to_all_bytes']} bytes (all ranks); the formula gives "
                 f"{5 * accum_per_rank * LAYERS} per rank and {want} bytes ({kept} kept rows, "
                 f"{elem}-byte elements)")
    return want


def check_overlap(dir_, what, buckets):
    """Every step launched each of rank 0's expert gradient reductions (`buckets`: whether it has
    any, i.e. an expert-dp group of two or more, or ZeRO) during its backward, as the dense
    buckets are (docs/MOE.md, "Overlapped with backward")."""
    for r in step_records(dir_):
        n, during = r["expert_reductions"], r["expert_reductions_in_backward"]
        if (n > 0) != buckets or during != n:
            fail(f"{what}: step {r['step']} launched {during} of rank 0's {n} expert reductions "
                 f"during backward; expected {'all, at least one' if buckets else 'none of 0'}")
    return n


def expect_error(cmd, env, needle, what):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    text = p.stdout + p.stderr
    if p.returncode == 0 or needle not in text:
        fail(f"{what}: expected a non-zero exit with '{needle}', got {p.returncode}\n{text[-2000:]}")
    lines = [l for l in text.splitlines() if "error" in l.lower()]
    print(f"{what}: {lines[0] if lines else needle}")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), moe_config(vocab))
    env = single_thread_env()
    mpi = mpi_prefix(mpirun)

    def common(d, extra=()):
        return ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=SEQ,
                                      extra=["machine.peak_gflops=100", "checkpoint.interval=6",
                                             f"train.micro_batch={MICRO}", "log.jsonl=train.jsonl",
                                             "checkpoint.dir=" + d] + list(extra))

    refs = {}
    for accum in (2, 4):
        refs[accum] = os.path.join(work, f"one_rank_accum{accum}")
        run([tessel] + common(refs[accum], [f"train.grad_accum={accum}"]), env=env)

    layouts = [(2, ["--ep", "2"], 2), (4, ["--ep", "2"], 4), (4, ["--dp", "4", "--ep", "4"], 4)]
    for ranks, flags, accum in layouts:
        what = f"np {ranks} {' '.join(flags)}"
        d = os.path.join(work, "np%d_%s" % (ranks, "_".join(f.strip("-") for f in flags)))
        out = run(mpi + ["-np", str(ranks), tessel] + common(d) + flags, env=env).stdout
        if "expert parallel: ep = " not in out:
            fail(f"{what}: the run did not report expert parallelism\n{out[-2000:]}")
        worst = compare_losses(refs[accum], d, what, STEPS)
        drops = check_routing(refs[accum], d, what)
        worst_p, name, worst_t = compare_params(final_params(refs[accum], STEPS), final_params(d, STEPS), what)
        check_all_to_all(d, ranks, 1, what)
        # Expert-dp groups of dp / ep ranks (two at np 4 --ep 2): their sums run during backward.
        reductions = check_overlap(d, what, ranks // int(flags[-1]) > 1)
        print(f"{what}: {STEPS}-step losses within {worst:.1e} of one rank (grad_accum {accum}), "
              f"the same routing ({drops} pairs dropped in all), final parameters within "
              f"{worst_p:.1e} (worst {name} {worst_t:.1e}), all-to-all bytes as the formula, "
              f"{reductions} expert reduction(s) a step launched during backward")

    # A checkpoint holds whole expert stacks (each rank writes its experts' rows): ep 2's step 6
    # resumes on one rank, and one rank's at ep 2; the global batch (6 sequences) is kept, so the
    # accumulation follows the layout.
    src = os.path.join(work, "np2_ep_2")
    d = os.path.join(work, "resume_ep2_on_one_rank")
    seed_resume(src, "step_000006", d)
    run([tessel, "train", "--resume", d], env=env)
    compare_losses(refs[2], d, "resume ep 2 -> one rank", STEPS)
    d = os.path.join(work, "resume_one_rank_at_ep2")
    seed_resume(refs[2], "step_000006", d)
    run(mpi + ["-np", "2", tessel, "train", "--resume", d, "--ep", "2"], env=env)
    compare_losses(refs[2], d, "resume one rank -> ep 2", STEPS)
    print("checkpoints: ep 2 resumed on one rank, and one rank's resumed at ep 2, continue the trajectory")

    # Bad layouts and settings: one clear error each.
    bad = os.path.join(work, "bad")
    three = write_json(os.path.join(work, "three.json"), moe_config(vocab, num_experts=3))
    expect_error(mpi + ["-np", "2", tessel] + common(bad, [f"model.config={three}"]) + ["--ep", "2"],
                 env, "3 experts, which --ep 2 ranks cannot split evenly", "3 experts at --ep 2")
    expect_error(mpi + ["-np", "2", tessel] + common(bad) + ["--dp", "2", "--ep", "4"], env,
                 "--ep 4 must divide the data-parallel degree 2", "--dp 2 --ep 4")
    for key, value, needle in (("top_k", 5, "'top_k' 5 exceeds 'num_experts' 4"),
                               ("capacity_factor", 0, "'capacity_factor' 0 must be > 0")):
        cfg = write_json(os.path.join(work, f"bad_{key}.json"), moe_config(vocab, **{key: value}))
        expect_error(mpi + ["-np", "2", tessel] + common(bad, [f"model.config={cfg}"]) + ["--ep", "2"],
                     env, needle, f"{key} {value} at --ep 2")
    dense = write_json(os.path.join(work, "dense.json"), gpt2_config(vocab, 32, EMBD, LAYERS, 2))
    expect_error(mpi + ["-np", "2", tessel] + common(bad, [f"model.config={dense}"]) + ["--ep", "2"],
                 env, "needs a mixture-of-experts model", "--ep 2 with a dense GPT-2")


if __name__ == "__main__":
    main()
