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

Usage: layout_matrix.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from dp_equivalence import losses, read_safetensors, small_tokenizer  # noqa: E402

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
STEPS = 20
ROWS = 4  # per micro-batch, over every dp rank


def fail(msg):
    print("layout_matrix: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}")
    return p


def norms(run_dir):
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        return {j["step"]: j["grad_norm"] for j in map(json.loads, f) if "step" in j}


def compare(ref_dir, dir_, what):
    a, b = losses(ref_dir), losses(dir_)
    na, nb = norms(ref_dir), norms(dir_)
    worst = 0.0
    for s in range(1, STEPS + 1):
        if s not in b:
            fail(f"{what}: no loss for step {s}")
        rel = abs(a[s] - b[s]) / abs(a[s])
        worst = max(worst, rel)
        if rel > 1e-5:
            fail(f"{what}: step {s} loss {b[s]!r} vs one rank {a[s]!r} (relative {rel:.2e} > 1e-5)")
        # The global norm counts every element once, whatever the layout shards or replicates.
        if abs(na[s] - nb[s]) > 1e-5 * na[s]:
            fail(f"{what}: step {s} gradient norm {nb[s]!r} vs one rank {na[s]!r}")
    pa = read_safetensors(os.path.join(ref_dir, f"step_{STEPS:06d}", "model.safetensors"))
    pb = read_safetensors(os.path.join(dir_, f"step_{STEPS:06d}", "model.safetensors"))
    if sorted(pa) != sorted(pb):
        fail(f"{what}: checkpoint tensors {sorted(pb)} differ from one rank's {sorted(pa)}")
    diff2 = norm2 = 0.0
    for name, x in pa.items():
        y = pb[name]
        if len(x) != len(y):
            fail(f"{what}: {name} has {len(y)} elements, one rank's {len(x)}")
        diff2 += sum((u - v) ** 2 for u, v in zip(x, y))
        norm2 += sum(u * u for u in x)
    worst_p = (diff2 / norm2) ** 0.5
    if worst_p > 1e-5:
        fail(f"{what}: final parameters differ by {worst_p:.2e} (relative L2) > 1e-5")
    return worst, worst_p


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    vocab = small_tokenizer(os.path.join(work, "tok"))
    run([tessel, "data", "prepare", "--tokenizer", os.path.join(work, "tok"), "--input",
         "/usr/share/common-licenses/GPL-3", "--out", os.path.join(work, "data"),
         "--split", "blank", "--val-fraction", "0.1"])
    cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": 16, "n_embd": 16,
           "n_layer": 3, "n_head": 2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump(cfg, f)
    # seq_len 7: uneven sequence pieces under --sp; grad_clip 0.5 clips most steps.
    common = ["train", "--set", "model.config=" + config,
              "--set", "data.dir=" + os.path.join(work, "data"), "--set", f"train.steps={STEPS}",
              "--set", "train.seq_len=7", "--set", "train.grad_accum=2",
              "--set", "optim.warmup_steps=3", "--set", "optim.lr=3e-3",
              "--set", "optim.grad_clip=0.5", "--set", "eval.interval=0",
              "--set", "sample.tokens=0", "--set", "log.interval=10",
              "--set", "checkpoint.interval=1000"]
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    ref = os.path.join(work, "ref")
    run([tessel] + common + ["--set", f"train.micro_batch={ROWS}", "--set", "checkpoint.dir=" + ref],
        env=env)
    mpi = [mpirun, "--oversubscribe", "--bind-to", "none"]
    rows = [("(1,1,1)", 0, "-", 0.0, 0.0)]
    clipped = sum(1 for n in norms(ref).values() if n > 0.5)
    if clipped < STEPS // 2:
        fail(f"only {clipped} of {STEPS} steps clip at 0.5: the norm would go untested")
    for dp, tp, pp, zero, sp in LAYOUTS:
        what = f"({dp},{tp},{pp})"
        d = os.path.join(work, f"dp{dp}_tp{tp}_pp{pp}_zero{zero}" + ("_sp" if sp else ""))
        cmd = mpi + ["-np", str(dp * tp * pp), tessel] + common + [
            "--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
            "--set", f"parallel.zero_stage={zero}", "--set", f"train.micro_batch={ROWS // dp}",
            "--set", "checkpoint.dir=" + d] + (["--sp"] if sp else [])
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
