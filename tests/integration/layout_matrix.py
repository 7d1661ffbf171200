#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layout matrix: `mpirun -np A*B*C tessel train --dp A --tp B --pp C [--sp] [--set
parallel.zero_stage=K]` equals one rank for every (dp, tp, pp) in {1, 2}^3, on a tiny GPT-2 for 20
steps. Every step's loss and the final parameters (the usual full checkpoint) must agree with the
one-rank run to 1e-5 (relative); ZeRO-3 runs on half the layouts and sequence parallelism on some
tp layouts; (2,2,2) with ZeRO-3 uses the interleaved schedule. Gradient clipping is active, so the global norm must count every element exactly
once. Prints the measured band per layout (the table in docs/PARALLEL.md).

Every layout takes the same global batch: grad_accum 2 micro-batches (the pipeline's) of 4 rows,
split over the dp ranks.

The GPT-2 trains with dropout 0.1 (embedding and residual): every layout draws exactly the
one-process masks (docs/PARALLEL.md, "Dropout"), so the same bounds hold; two layouts recompute
their blocks (train.recompute=full), whose replay must redraw the same masks. The final validation
loss (the same windows in every layout: micro_batch x dp rows per evaluated micro-batch) agrees
too; at GPT-2 355M it differed by layout (6.948, 6.999, 6.859) while each rank drew its own masks.

With FAMILY llama the same check runs a tiny LLaMA (RMSNorm, RoPE, SwiGLU, tied head, one KV head
for four query heads, so that tp 2 replicates it) over a subset of the layouts: dp with ZeRO-3, tp
with sp, pp, tp with ZeRO-2 (the copies' gradient sum before dp keeps shards), and (2,2,2) with
ZeRO-3 and sp.

Usage: layout_matrix.py TESSEL MPIRUN WORKDIR [FAMILY]   (FAMILY: gpt2, the default, or llama)
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (RUN_REL_TOL, check_same_tensors, compare_losses, compare_params, fail,  # noqa: E402
                         final_params, gpt2_config, mpi_prefix, prepare_workdir, run,
                         single_thread_env, step_records, train_sets, write_json)

# (dp, tp, pp, zero_stage, sequence parallel)
LAYOUTS = [
    (2, 1, 1, 3, False),
    (1, 2, 1, 0, True),
    (1, 1, 2, 0, False),
    (2, 2, 1, 3, True),
    (2, 1, 2, 3, False),
    (1, 2, 2, 0, True),
    (2, 2, 2, 3, True),
    # tp with the other ZeRO stages: 2 keeps only gradient shards (sequence-parallel sums first).
    (2, 2, 1, 2, True),
    (2, 2, 2, 1, False),
]
# Layouts that also recompute every block (against the one-rank run without recomputation).
RECOMPUTE = {(1, 1, 2, 0, False), (2, 2, 1, 3, True)}
DROPOUT = 0.1  # GPT-2's embd_pdrop and resid_pdrop (LLaMA has no dropout)
# The LLaMA subset: one layout per axis and all three together.
LLAMA_LAYOUTS = [
    (2, 1, 1, 3, False),
    (1, 2, 1, 0, True),
    (1, 1, 2, 0, False),
    (2, 2, 1, 2, False),
    (2, 2, 2, 3, True),
]
STEPS = 20
ROWS = 4  # per micro-batch, over every dp rank


def norms(run_dir):
    return {j["step"]: j["grad_norm"] for j in step_records(run_dir)}


def final_val_loss(run_dir):
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        vals = [j["val_loss"] for j in map(json.loads, f) if "val_loss" in j]
    if not vals:
        fail(f"{run_dir}: no validation loss in train.jsonl")
    return vals[-1]


def compare(ref_dir, dir_, what):
    na, nb = norms(ref_dir), norms(dir_)

    def norm_check(s):
        # The global norm counts every element once, whatever the layout shards or replicates.
        # RUN_REL_TOL: summation order only (its reason in tessel_runs.py).
        if abs(na[s] - nb[s]) > RUN_REL_TOL * na[s]:
            fail(f"{what}: step {s} gradient norm {nb[s]!r} vs one rank {na[s]!r}")

    worst = compare_losses(ref_dir, dir_, what, STEPS, per_step=norm_check)
    pa, pb = final_params(ref_dir, STEPS), final_params(dir_, STEPS)
    check_same_tensors(pa, pb, what)
    worst_p = compare_params(pa, pb, what)[0]
    va, vb = final_val_loss(ref_dir), final_val_loss(dir_)
    if abs(va - vb) > RUN_REL_TOL * abs(va):
        fail(f"{what}: final validation loss {vb!r} vs one rank {va!r}")
    return worst, worst_p


def llama_config(vocab):
    """A tiny LLaMA: 3 layers of width 16, 4 query heads sharing 1 key/value head (multi-query:
    under tp 2 each rank holds a copy of it), a tied head."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
            "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 1, "max_position_embeddings": 16,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True}


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    family = sys.argv[4] if len(sys.argv) > 4 else "gpt2"
    if family not in ("gpt2", "llama"):
        fail(f"unknown family {family!r} (gpt2 or llama)")
    vocab = prepare_workdir(tessel, work)
    model = (llama_config(vocab) if family == "llama" else
             gpt2_config(vocab, n_positions=16, n_embd=16, n_layer=3, n_head=2, dropout=DROPOUT))
    config = write_json(os.path.join(work, "config.json"), model)
    layouts = LLAMA_LAYOUTS if family == "llama" else LAYOUTS
    # seq_len 7: uneven sequence pieces under --sp; grad_clip 0.5 clips most steps.
    common = ["train"] + train_sets(config, os.path.join(work, "data"), STEPS, seq_len=7,
                                    extra=["train.grad_accum=2", "optim.grad_clip=0.5",
                                           "checkpoint.interval=1000"])
    env = single_thread_env()
    ref = os.path.join(work, "ref")
    run([tessel] + common + ["--set", f"train.micro_batch={ROWS}", "--set", "checkpoint.dir=" + ref],
        env=env)
    mpi = mpi_prefix(mpirun)
    rows = [("(1,1,1)", 0, "-", 0.0, 0.0)]
    clipped = sum(1 for n in norms(ref).values() if n > 0.5)
    if clipped < STEPS // 2:
        fail(f"only {clipped} of {STEPS} steps clip at 0.5: the norm would go untested")
    for dp, tp, pp, zero, sp in layouts:
        recompute = (dp, tp, pp, zero, sp) in RECOMPUTE
        what = f"({dp},{tp},{pp})" + (" recompute" if recompute else "")
        d = os.path.join(work, f"dp{dp}_tp{tp}_pp{pp}_zero{zero}" + ("_sp" if sp else "") +
                         ("_recompute" if recompute else ""))
        cmd = mpi + ["-np", str(dp * tp * pp), tessel] + common + [
            "--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
            "--set", f"parallel.zero_stage={zero}", "--set", f"train.micro_batch={ROWS // dp}",
            "--set", "checkpoint.dir=" + d] + (["--sp"] if sp else []) + (
                ["--set", "train.recompute=full"] if recompute else [])
        if (dp, tp, pp, zero) == (2, 2, 2, 3):  # two virtual stages per rank, 4 stages of 5 layers
            cmd += ["--set", "parallel.schedule=interleaved:2"]
        t0 = time.time()
        p = run(cmd, env=env)
        if dp * tp * pp > 1 and "exposed dp" not in p.stdout:
            fail(f"{what}: no per-step breakdown in the progress line:\n{p.stdout[-2000:]}")
        loss_band, param_band = compare(ref, d, what)
        rows.append((what, zero, "on" if sp else "-", loss_band, param_band))
        print(f"{what} zero {zero} sp {'on' if sp else 'off'}: 20-step losses within {loss_band:.1e}, "
              f"final parameters within {param_band:.1e} ({time.time() - t0:.1f} s)")
    print("| (dp, tp, pp) | ZeRO | sp | max rel. loss diff | max rel. param diff |")
    print("|---|---|---|---|---|")
    for what, zero, sp, lb, pb in rows:
        print(f"| {what} | {zero} | {sp} | {lb:.1e} | {pb:.1e} |")


if __name__ == "__main__":
    main()
