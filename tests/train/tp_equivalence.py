#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tensor (and sequence) parallel training equals one rank: `mpirun -np N tessel train --tp N
[--sp]` against `tessel train` on the same data and initialisation, for 20 steps. Every step's loss
and the final parameters (gathered into the usual checkpoint) must agree to 1e-5 (relative); so
must tp=2 with --sp and dropout on (0.1), dp x tp (--dp 2 --tp 2), and a tp=2 checkpoint
resumed at tp=4 with --sp. Greedy `tessel generate --tp N` emits the ids of one rank. The
vocabulary (257) is padded on every tp size.

Usage: tp_equivalence.py TESSEL MPIRUN WORKDIR TP [TP ...]
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dp_equivalence import losses, read_safetensors, small_tokenizer  # noqa: E402


def fail(msg):
    print("tp_equivalence: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}")
    return p


def compare(ref_dir, dir_, what, steps):
    a, b = losses(ref_dir), losses(dir_)
    worst = 0.0
    for s in range(1, steps + 1):
        if s not in b:
            fail(f"{what}: no loss for step {s}")
        rel = abs(a[s] - b[s]) / abs(a[s])
        worst = max(worst, rel)
        if rel > 1e-5:
            fail(f"{what}: step {s} loss {b[s]!r} vs one rank {a[s]!r} (relative {rel:.2e} > 1e-5)")
    pa = read_safetensors(os.path.join(ref_dir, f"step_{steps:06d}", "model.safetensors"))
    pb = read_safetensors(os.path.join(dir_, f"step_{steps:06d}", "model.safetensors"))
    if sorted(pa) != sorted(pb):
        fail(f"{what}: checkpoint tensors {sorted(pb)} differ from one rank's {sorted(pa)}")
    diff2 = norm2 = 0.0
    for name, x in pa.items():
        y = pb[name]
        if len(x) != len(y):
            fail(f"{what}: {name} has {len(y)} elements, one rank's {len(x)}")
        diff2 += sum((u - v) ** 2 for u, v in zip(x, y))
        norm2 += sum(u * u for u in x)
    rel_p = (diff2 / norm2) ** 0.5
    if rel_p > 1e-5:
        fail(f"{what}: final parameters differ by {rel_p:.2e} (relative L2) > 1e-5")
    print(f"{what}: 20-step losses within {worst:.1e}, final parameters within {rel_p:.1e}")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    tps = [int(x) for x in sys.argv[4:]]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    vocab = small_tokenizer(os.path.join(work, "tok"))
    run([tessel, "data", "prepare", "--tokenizer", os.path.join(work, "tok"), "--input",
         "/usr/share/common-licenses/GPL-3", "--out", os.path.join(work, "data"),
         "--split", "blank", "--val-fraction", "0.1"])
    cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": 32, "n_embd": 24,
           "n_layer": 2, "n_head": 4, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump(cfg, f)
    steps = 20
    # seq_len 15: the sequence splits unevenly over 2 and 4 ranks under --sp.
    common = ["train", "--set", "model.config=" + config,
              "--set", "data.dir=" + os.path.join(work, "data"), "--set", f"train.steps={steps}",
              "--set", "train.seq_len=15", "--set", "optim.warmup_steps=3", "--set", "optim.lr=3e-3",
              "--set", "eval.interval=0", "--set", "sample.tokens=0", "--set", "log.interval=10",
              "--set", "checkpoint.interval=10", "--set", "optim.grad_clip=0.5"]
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    ref = os.path.join(work, "tp1")
    run([tessel] + common + ["--set", "train.micro_batch=6", "--set", "checkpoint.dir=" + ref], env=env)
    mpi = [mpirun, "--oversubscribe", "--bind-to", "none"]
    for tp in tps:
        for sp in (False, True):
            what = f"tp={tp}" + (" sp" if sp else "")
            d = os.path.join(work, f"tp{tp}" + ("_sp" if sp else ""))
            p = run(mpi + ["-np", str(tp), tessel] + common + ["--tp", str(tp)] + (["--sp"] if sp else []) +
                    ["--set", "train.micro_batch=6", "--set", "checkpoint.dir=" + d], env=env)
            if "padded to" not in p.stdout:
                fail(f"{what}: no line announcing the padded vocabulary")
            compare(ref, d, what, steps)
    # Dropout on: under --sp each rank draws its piece of the one-process mask (resid and embd
    # dropouts; the fused attention applies no dropout on its probabilities).
    drop_config = os.path.join(work, "config_dropout.json")
    with open(drop_config, "w") as f:
        json.dump(dict(cfg, resid_pdrop=0.1, embd_pdrop=0.1), f)
    drop_common = [a.replace(config, drop_config) if a.startswith("model.config=") else a
                   for a in common] + ["--set", "train.micro_batch=6"]
    drop_ref = os.path.join(work, "tp1_dropout")
    run([tessel] + drop_common + ["--set", "checkpoint.dir=" + drop_ref], env=env)
    d = os.path.join(work, f"tp{tps[0]}_sp_dropout")
    run(mpi + ["-np", str(tps[0]), tessel] + drop_common + ["--tp", str(tps[0]), "--sp",
                                                            "--set", "checkpoint.dir=" + d], env=env)
    if losses(drop_ref)[steps] == losses(ref)[steps]:
        fail("dropout 0.1 left the one-rank losses unchanged: no mask was applied")
    compare(drop_ref, d, f"tp={tps[0]} sp dropout 0.1", steps)
    # dp x tp: the dp ranks split each batch, the tp ranks of a dp rank read the same rows.
    d = os.path.join(work, "dp2_tp2")
    run(mpi + ["-np", "4", tessel] + common + ["--dp", "2", "--tp", "2", "--set", "train.micro_batch=3",
                                               "--set", "checkpoint.dir=" + d], env=env)
    compare(ref, d, "dp=2 x tp=2", steps)
    # Checkpoints hold full tensors: tp=2's step 10 resumed at tp=4 with --sp continues the same run.
    a, b = tps[0], tps[-1]
    src = os.path.join(work, f"tp{a}", "step_000010")
    d = os.path.join(work, f"resume_tp{a}_to_tp{b}_sp")
    shutil.copytree(src, os.path.join(d, "step_000010"))
    with open(os.path.join(d, "latest"), "w") as f:
        f.write("step_000010\n")
    shutil.copy(os.path.join(work, f"tp{a}", "train.jsonl"), os.path.join(d, "train.jsonl"))
    run(mpi + ["-np", str(b), tessel, "train", "--resume", d, "--tp", str(b), "--sp"], env=env)
    compare(ref, d, f"resume tp={a} -> tp={b} sp", steps)
    # Greedy generation from a random model with large weights (more varied than a 20-step one).
    model, gen_config = os.path.join(work, "model"), os.path.join(work, "config_gen.json")
    with open(gen_config, "w") as f:
        json.dump(dict(cfg, initializer_range=0.5), f)
    run([tessel, "init", "--config", gen_config, "--out", model, "--seed", "7"], env=env)
    gen = ["generate", "-m", model, "--prompt-ids", "5,9,12,40,77", "-n", "16", "--temp", "0",
           "--format", "json"]
    want = json.loads(run([tessel] + gen, env=env).stdout)["generated_ids"]
    for tp in tps:
        got = json.loads(run(mpi + ["-np", str(tp), tessel] + gen + ["--tp", str(tp)], env=env).stdout)
        if got["generated_ids"] != want:
            fail(f"generate --tp {tp}: ids {got['generated_ids']} vs one rank {want}")
    print(f"generate --tp {tps}: the same {len(want)} greedy ids as one rank ({len(set(want))} distinct)")


if __name__ == "__main__":
    main()
