#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training equals one rank: `mpirun -np N tessel train --dp N` with micro_batch B/N
against `tessel train` with micro_batch B, on the same data and initialisation, for 20 steps.
Every step's loss and the final parameters must agree to 1e-5 (relative), for ZeRO stages 0 to 3.
Every step issues exactly the collectives its stage should, of the expected sizes (counted by the
flight recorder, reported in train.jsonl), and each rank's parameter + gradient + optimizer bytes
are within 10% of the ZeRO formula. Checkpoints (per-rank shards under ZeRO) resumed at another dp
size and stage continue the same trajectory.

Usage: dp_equivalence.py TESSEL MPIRUN WORKDIR DP [DP ...]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
from array import array


def fail(msg):
    print("dp_equivalence: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}")
    return p


def small_tokenizer(d):
    """A byte-level BPE vocabulary: the 256 byte symbols of GPT-2's byte-to-unicode table."""
    os.makedirs(d, exist_ok=True)
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, c in enumerate(cs)}
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(d, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    return len(vocab)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e
        b, end = e["data_offsets"]
        out[name] = array("f", data[b:end])
    return out


def losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "step" in j:
                out[j["step"]] = j["loss"]
    return out


def val_losses(run_dir):
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        return [j["val_loss"] for j in map(json.loads, f) if "eval_step" in j]


def compare(ref_dir, dir_, what, steps):
    a, b = losses(ref_dir), losses(dir_)
    # The evaluation splits the same windows over the ranks: the same validation loss.
    va, vb = val_losses(ref_dir), val_losses(dir_)
    if not va or len(va) != len(vb) or abs(va[-1] - vb[-1]) > 1e-5 * abs(va[-1]):
        fail(f"{what}: validation losses {vb} vs one rank {va}")
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
    # All parameters as one vector: relative L2 distance. (Per element it is looser: entries with a
    # zero or tiny true gradient, like the key bias, whose q.b term softmax ignores, receive
    # rounding noise that Adam normalises into updates of lr size, in any implementation.)
    diff2 = norm2 = 0.0
    worst_name, worst_t = "", 0.0
    for name, x in pa.items():
        y = pb[name]
        d2 = sum((u - v) ** 2 for u, v in zip(x, y))
        n2 = sum(u * u for u in x)
        diff2 += d2
        norm2 += n2
        if n2 > 0 and (d2 / n2) ** 0.5 > worst_t:
            worst_name, worst_t = name, (d2 / n2) ** 0.5
    worst_p = (diff2 / norm2) ** 0.5
    if worst_p > 1e-5:
        fail(f"{what}: final parameters differ by {worst_p:.2e} (relative L2) > 1e-5")
    print(f"{what}: 20-step losses within {worst:.1e}, final parameters within {worst_p:.1e} "
          f"(relative L2; worst tensor {worst_name} {worst_t:.1e})")


def expected_collectives(cfg, dp, stage):
    """(count by kind, bytes) one step issues on the dp axis, as docs/PARALLEL.md describes.
    Bytes are those of the tensor each call is given: an all_gather's is this rank's block, a
    reduce_scatter's the whole padded bucket."""
    e, v, p, n = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    block = 12 * e * e + 13 * e
    psi = v * e + p * e + n * block + 2 * e
    pad = lambda x: -(-x // dp) * dp
    loss, norm = 4, 8  # the mean loss (f32) and stage 2-3's square sum (f64)
    # Stages 0-2: one bucket, the model being far below the 25 MiB default.
    if stage == 0:
        return {"all_reduce": 2}, 4 * psi + loss
    if stage == 1:
        return {"all_reduce": 2, "all_gather": 1}, 4 * psi + loss + 4 * pad(psi) // dp
    if stage == 2:
        return ({"reduce_scatter": 1, "all_gather": 1, "all_reduce": 2},
                4 * pad(psi) + 4 * pad(psi) // dp + loss + norm)
    # Stage 3: units wte, wpe, h.0 .. h.{n-1}, ln_f; each gathered in forward and again in
    # backward, and its gradients reduce-scattered once.
    units = [v * e, p * e] + [block] * n + [2 * e]
    return ({"all_gather": 2 * len(units), "reduce_scatter": len(units), "all_reduce": 2},
            sum(2 * 4 * pad(u) // dp + 4 * pad(u) for u in units) + loss + norm)


def check_steps(run_dir, cfg, dp, stage, what):
    """Collectives per step and per-rank bytes against the formula, from rank 0's train.jsonl."""
    want, want_bytes = expected_collectives(cfg, dp, stage)
    e = cfg["n_embd"]
    psi = (cfg["vocab_size"] + cfg["n_positions"]) * e + cfg["n_layer"] * (12 * e * e + 13 * e) + 2 * e
    per_param = {0: 16, 1: 8 + 8 / dp, 2: 4 + 12 / dp, 3: 16 / dp}[stage]
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        records = [json.loads(line) for line in f]
    steps = [r for r in records if "step" in r]
    for r in steps:
        if r["collectives"] != want or r["collective_bytes"] != want_bytes:
            fail(f"{what}: step {r['step']} issued {r['collectives']} ({r['collective_bytes']} bytes), "
                 f"expected {want} ({want_bytes} bytes)")
        held = r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"]
        formula = per_param * psi
        if abs(r["expected_state_bytes"] - formula) > 0.001 * formula or abs(held / formula - 1) > 0.1:
            fail(f"{what}: step {r['step']} holds {held} bytes of parameters + gradients + "
                 f"optimizer state; the ZeRO formula says {formula:.0f} (reported "
                 f"{r['expected_state_bytes']})")
    print(f"{what}: every step issued {want} ({want_bytes} bytes); {held} bytes of model state "
          f"per rank vs {formula:.0f} by the formula")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    dps = [int(x) for x in sys.argv[4:]]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    vocab = small_tokenizer(os.path.join(work, "tok"))
    run([tessel, "data", "prepare", "--tokenizer", os.path.join(work, "tok"), "--input",
         "/usr/share/common-licenses/GPL-3", "--out", os.path.join(work, "data"),
         "--split", "blank", "--val-fraction", "0.1"])
    cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": 32, "n_embd": 24,
           "n_layer": 2, "n_head": 2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(cfg, f)
    batch, steps = 12, 20
    common = ["train", "--set", "model.config=" + os.path.join(work, "config.json"),
              "--set", "data.dir=" + os.path.join(work, "data"), "--set", f"train.steps={steps}",
              "--set", "train.seq_len=16", "--set", "optim.warmup_steps=3", "--set", "optim.lr=3e-3",
              "--set", "eval.interval=0", "--set", "sample.tokens=0", "--set", "log.interval=10",
              "--set", "machine.peak_gflops=100", "--set", "checkpoint.interval=10"]
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    ref = os.path.join(work, "dp1")
    run([tessel] + common + ["--set", f"train.micro_batch={batch}", "--set", "checkpoint.dir=" + ref], env=env)
    mpi = [mpirun, "--oversubscribe", "--bind-to", "none"]
    for dp in dps:
        for stage in (0, 1, 2, 3):
            d = os.path.join(work, f"dp{dp}_zero{stage}")
            run(mpi + ["-np", str(dp), tessel] + common +
                ["--dp", str(dp), "--set", f"train.micro_batch={batch // dp}",
                 "--set", f"parallel.zero_stage={stage}", "--set", "checkpoint.dir=" + d], env=env)
            compare(ref, d, f"dp={dp} zero_stage={stage}", steps)
            check_steps(d, cfg, dp, stage, f"dp={dp} zero_stage={stage}")
    # A checkpoint is layout-independent: dp=2 ZeRO-1 shards at step 10, resumed at dp=4 ZeRO-2 and
    # at dp=4 ZeRO-3, continue the same trajectory.
    if len(dps) >= 2:
        a, b = dps[0], dps[1]
        src = os.path.join(work, f"dp{a}_zero1", "step_000010")
        shards = sorted(x for x in os.listdir(src) if x.startswith("pieces_"))
        if shards != [f"pieces_{r:05d}_of_{a:05d}.safetensors" for r in range(a)] + ["pieces_index.json"]:
            fail(f"dp={a} zero_stage=1 checkpoint holds piece files {shards}")
        with open(os.path.join(src, "COMMITTED")) as f:
            manifest = json.load(f)["files"]
        if not all(x in manifest for x in shards + ["model.safetensors"]):
            fail(f"the manifest of {src} does not list every shard: {sorted(manifest)}")
        for stage in (2, 3):
            d = os.path.join(work, f"resume_dp{a}_zero1_to_dp{b}_zero{stage}")
            shutil.copytree(src, os.path.join(d, "step_000010"))
            with open(os.path.join(d, "latest"), "w") as f:
                f.write("step_000010\n")
            shutil.copy(os.path.join(work, f"dp{a}_zero1", "train.jsonl"), os.path.join(d, "train.jsonl"))
            run(mpi + ["-np", str(b), tessel, "train", "--resume", d, "--dp", str(b),
                       "--set", f"train.micro_batch={batch // b}", "--set", f"parallel.zero_stage={stage}"],
                env=env)
            compare(ref, d, f"resume dp={a} zero_stage=1 -> dp={b} zero_stage={stage}", steps)

if __name__ == "__main__":
    main()
