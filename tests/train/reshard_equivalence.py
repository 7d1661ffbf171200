#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Layout-independent checkpoints: a checkpoint written at step 10 by one layout (every rank its
own piece file, plus an index) resumes in another layout and continues the trajectory of one rank:
every step's loss and the final parameters within 1e-5 (relative) of an uninterrupted one-rank run.
Saved at dp=2 ZeRO-3, resumed at dp=3 ZeRO-3 and on one rank; saved at tp=2, resumed at tp=1 and
tp=4; saved at pp=2, resumed at pp=1. With --composed, also saved at (dp, tp, pp) = (2, 2, 2) and
resumed at (1, 1, 1), (4, 1, 2) and (1, 2, 4); saved at (2, 2, 1) and (2, 1, 2) with ZeRO-3 and
resumed at (1, 1, 1), (2, 1, 2) ZeRO-3 and (1, 2, 1).

Usage: reshard_equivalence.py TESSEL MPIRUN WORKDIR [--composed]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
from array import array


def fail(msg):
    print("reshard_equivalence: FAIL: " + msg, file=sys.stderr)
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
    if sorted(pa) != sorted(pb):
        fail(f"{what}: the final model holds {sorted(pb)}, one rank's {sorted(pa)}")
    diff2 = norm2 = 0.0
    for name, x in pa.items():
        y = pb[name]
        diff2 += sum((u - v) ** 2 for u, v in zip(x, y))
        norm2 += sum(u * u for u in x)
    rel_p = (diff2 / norm2) ** 0.5
    if rel_p > 1e-5:
        fail(f"{what}: final parameters differ by {rel_p:.2e} (relative L2) > 1e-5")
    print(f"{what}: losses within {worst:.1e}, final parameters within {rel_p:.1e}")


def check_pieces(ckpt, world, what):
    """One piece file per rank, an index naming them all, and a manifest covering every file."""
    files = sorted(x for x in os.listdir(ckpt) if x.startswith("pieces_") and x.endswith(".safetensors"))
    want = [f"pieces_{r:05d}_of_{world:05d}.safetensors" for r in range(world)]
    if files != want:
        fail(f"{what}: {ckpt} holds piece files {files}, expected {want}")
    with open(os.path.join(ckpt, "pieces_index.json")) as f:
        index = json.load(f)
    if index["files"] != want or index["world"] != world:
        fail(f"{what}: the index lists {index['files']} for world {index['world']}")
    with open(os.path.join(ckpt, "COMMITTED")) as f:
        manifest = json.load(f)["files"]
    missing = [x for x in want + ["pieces_index.json", "model.safetensors", "state.json"] if x not in manifest]
    if missing:
        fail(f"{what}: the manifest of {ckpt} does not list {missing}")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    composed = "--composed" in sys.argv[4:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    vocab = small_tokenizer(os.path.join(work, "tok"))
    run([tessel, "data", "prepare", "--tokenizer", os.path.join(work, "tok"), "--input",
         "/usr/share/common-licenses/GPL-3", "--out", os.path.join(work, "data"),
         "--split", "blank", "--val-fraction", "0.1"])
    # n_head 4 splits over tp 4; the vocabulary (257) is padded under every tp > 1.
    cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": 32, "n_embd": 24,
           "n_layer": 2, "n_head": 4, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(cfg, f)
    batch, steps = 12, 20
    common = ["--set", "model.config=" + os.path.join(work, "config.json"),
              "--set", "data.dir=" + os.path.join(work, "data"), "--set", f"train.steps={steps}",
              "--set", "train.seq_len=16", "--set", "optim.warmup_steps=3", "--set", "optim.lr=3e-3",
              "--set", "eval.interval=0", "--set", "sample.tokens=0", "--set", "log.interval=10",
              "--set", "machine.peak_gflops=100", "--set", "checkpoint.interval=10",
              "--set", "train.grad_accum=4"]
    env = dict(os.environ, TESSEL_NUM_THREADS="1", OMP_NUM_THREADS="1")
    mpi = [mpirun, "--oversubscribe", "--bind-to", "none"]

    def launch(dp, tp, pp, stage, extra):
        world = dp * tp * pp
        head = (mpi + ["-np", str(world)]) if world > 1 else []
        return run(head + [tessel, "train"] + extra +
                   ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
                    "--set", f"train.micro_batch={batch // dp}", "--set", f"parallel.zero_stage={stage}"],
                   env=env)

    ref = os.path.join(work, "ref")
    launch(1, 1, 1, 0, common + ["--set", "checkpoint.dir=" + ref])
    cases = [((2, 1, 1, 3), [(3, 1, 1, 3), (1, 1, 1, 0)]),
             ((1, 2, 1, 0), [(1, 1, 1, 0), (1, 4, 1, 0)]),
             ((1, 1, 2, 0), [(1, 1, 1, 0)])]
    if composed:
        cases.append(((2, 2, 2, 1), [(1, 1, 1, 0), (4, 1, 2, 2), (1, 2, 4, 0)]))
        # ZeRO-3 flat blocks cut through tp shards, and through a pipeline stage's parameters.
        cases.append(((2, 2, 1, 3), [(1, 1, 1, 0), (2, 1, 2, 3)]))
        cases.append(((2, 1, 2, 3), [(1, 2, 1, 0)]))
    for saved, resumes in cases:
        name = "dp{}_tp{}_pp{}_zero{}".format(*saved)
        src = os.path.join(work, name)
        launch(*saved, common + ["--set", "checkpoint.dir=" + src])
        compare(ref, src, name, steps)
        ckpt = os.path.join(src, "step_000010")
        check_pieces(ckpt, saved[0] * saved[1] * saved[2], name)
        for layout in resumes:
            to = "dp{}_tp{}_pp{}_zero{}".format(*layout)
            d = os.path.join(work, f"{name}_to_{to}")
            shutil.copytree(ckpt, os.path.join(d, "step_000010"))
            with open(os.path.join(d, "latest"), "w") as f:
                f.write("step_000010\n")
            shutil.copy(os.path.join(src, "train.jsonl"), os.path.join(d, "train.jsonl"))
            launch(*layout, ["--resume", d])
            compare(ref, d, f"saved at {name}, resumed at {to}", steps)


if __name__ == "__main__":
    main()
