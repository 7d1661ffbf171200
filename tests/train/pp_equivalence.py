#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Pipeline-parallel training equals one rank: `mpirun -np N tessel train --pp N --microbatches M
--schedule S` against `tessel train` with train.grad_accum = M (a pipeline's micro-batches are the
accumulation steps, so both consume the same batches), on the same data and initialisation, for 20
steps. Every step's loss and the final parameters must agree to 1e-5 (relative), for pp 2 and 4,
each schedule, M in {1, 3, 8} (a subset covering every value), and pp=2 x dp=2 with ZeRO stages 1
and 2. A pp=2 x dp=2 checkpoint resumed on one rank continues the same trajectory.

Usage: pp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
from array import array


def fail(msg):
    print("pp_equivalence: FAIL: " + msg, file=sys.stderr)
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


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    vocab = small_tokenizer(os.path.join(work, "tok"))
    run([tessel, "data", "prepare", "--tokenizer", os.path.join(work, "tok"), "--input",
         "/usr/share/common-licenses/GPL-3", "--out", os.path.join(work, "data"),
         "--split", "blank", "--val-fraction", "0.1"])
    # Six blocks: pp=4 with two virtual stages per rank needs 8 stages of embedding, blocks, head.
    cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": 32, "n_embd": 24,
           "n_layer": 6, "n_head": 2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(cfg, f)
    batch, steps = 4, 20
    common = ["train", "--set", "model.config=" + os.path.join(work, "config.json"),
              "--set", "data.dir=" + os.path.join(work, "data"), "--set", f"train.steps={steps}",
              "--set", "train.seq_len=16", "--set", "optim.warmup_steps=3", "--set", "optim.lr=3e-3",
              "--set", "eval.interval=0", "--set", "sample.tokens=0", "--set", "log.interval=10",
              "--set", "machine.peak_gflops=100", "--set", "checkpoint.interval=10"]
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    refs = {}
    for m in (1, 3, 8):
        refs[m] = os.path.join(work, f"pp1_m{m}")
        run([tessel] + common + ["--set", f"train.micro_batch={batch}", "--set", f"train.grad_accum={m}",
                                 "--set", "checkpoint.dir=" + refs[m]], env=env)
    mpi = [mpirun, "--oversubscribe", "--bind-to", "none"]
    # (pp, dp, schedule, M, zero stage): every pp, schedule and M at least once.
    cases = [(2, 1, "gpipe", 3, 0), (2, 1, "1f1b", 1, 0), (4, 1, "gpipe", 8, 0),
             (4, 1, "1f1b", 3, 0), (4, 1, "interleaved:2", 8, 0), (2, 2, "1f1b", 3, 1),
             (2, 2, "interleaved:2", 8, 2)]
    for pp, dp, schedule, m, stage in cases:
        name = f"pp{pp}_dp{dp}_{schedule.replace(':', '')}_m{m}_zero{stage}"
        d = os.path.join(work, name)
        run(mpi + ["-np", str(pp * dp), tessel] + common +
            ["--pp", str(pp), "--dp", str(dp), "--schedule", schedule, "--microbatches", str(m),
             "--set", f"train.micro_batch={batch // dp}", "--set", f"parallel.zero_stage={stage}",
             "--set", "checkpoint.dir=" + d], env=env)
        compare(refs[m], d, f"pp={pp} dp={dp} {schedule} M={m} zero_stage={stage}", steps)
    # A pp=2 x dp=2 ZeRO-1 checkpoint is the usual whole-model checkpoint: resumed on one rank at
    # step 10, it continues the same trajectory.
    src = os.path.join(work, "pp2_dp2_1f1b_m3_zero1")
    d = os.path.join(work, "resume_pp2_dp2_to_pp1")
    shutil.copytree(os.path.join(src, "step_000010"), os.path.join(d, "step_000010"))
    with open(os.path.join(d, "latest"), "w") as f:
        f.write("step_000010\n")
    shutil.copy(os.path.join(src, "train.jsonl"), os.path.join(d, "train.jsonl"))
    run([tessel, "train", "--resume", d, "--set", f"train.micro_batch={batch}"], env=env)
    compare(refs[3], d, "resume pp=2 dp=2 zero_stage=1 1f1b M=3 -> one rank", steps)


if __name__ == "__main__":
    main()
