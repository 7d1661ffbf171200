#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Older checkpoints resume at several ranks (docs/TRAINING.md, "Older checkpoints"): a checkpoint
in the whole-model layout that tessel wrote before checkpoints were pieces (model.safetensors and
optimizer.safetensors with every full AdamW moment, no piece files) is resumed under mpirun at
dp 2 ZeRO-3, tp 2 and pp 2, each rank reading only the byte ranges of what it holds.

One rank trains a tiny GPT-2 (vocabulary 257, padded under tp; n_embd 24, 4 heads, 2 blocks) for 6
steps with a checkpoint at step 3, which this script rewrites in the older layout (the moments
assembled from the piece files, the manifest's sizes and CRC-32C computed here). Then, for one rank
and for each two-rank layout:
  - loaded: the run resumes the older checkpoint and takes one step whose update is skipped
    (fault.nan_at_step=4: a NaN gradient, no rank updates), so its step-4 checkpoint holds what the
    ranks loaded. Every parameter and both moments of every parameter, assembled from the piece
    files, equal bit for bit those the one-rank resume holds, which equal the step-3 checkpoint
    the older one was made from.
  - continued: the run resumes the older checkpoint and trains steps 4-6; its losses equal the
    uninterrupted run's bit for bit on one rank and within the multi-rank tolerance (summation
    order, tests/common/tessel_runs.py) on two.

About 10 runs of one or two processes, ~20 s on two loaded cores.
Usage: legacy_resume_ranks.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import shutil
import struct
import sys
from array import array

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (compare_losses, fail, gpt2_config, losses, mpi_prefix,  # noqa: E402
                         prepare_workdir, run, single_thread_env, train_sets, write_json)

# (dp, tp, pp, zero_stage)
LAYOUTS = [(1, 1, 1, 0), (2, 1, 1, 3), (1, 2, 1, 0), (1, 1, 2, 0)]
BATCH = 4


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli), as the checkpoint manifest records it."""
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def safetensors(path):
    """(header, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), f.read()


def write_safetensors(path, tensors):
    """NAME -> (shape, array('f')) written as F32 safetensors."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def assemble(ckpt):
    """Every global tensor of a checkpoint in pieces: NAME -> (shape, array('f')), each element
    placed from the piece that holds it (a box of the tensor, and a range of the box's elements)."""
    with open(os.path.join(ckpt, "pieces_index.json")) as f:
        index = json.load(f)
    out = {t["name"]: (t["shape"], array("f", [float("nan")]) * max(1, _numel(t["shape"])))
           for t in index["tensors"]}
    files = {}
    for p in index["pieces"]:
        name = index["files"][p["file"]]
        if name not in files:
            files[name] = safetensors(os.path.join(ckpt, name))
        header, data = files[name]
        e = header[p["key"]]
        values = array("f", data[e["data_offsets"][0]:e["data_offsets"][1]])
        shape, full = out[p["tensor"]]
        start, length = p["start"], p["length"]
        for k in range(p["begin"], p["end"]):
            rest, flat = k, 0
            idx = []
            for n in reversed(length):
                idx.append(rest % n)
                rest //= n
            idx.reverse()
            for d, size in enumerate(shape):
                flat = flat * size + start[d] + idx[d]
            full[flat] = values[k - p["begin"]]
    return out


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def make_legacy(src_ckpt, run_dir, step):
    """SRC_CKPT (in pieces) rewritten as an older tessel wrote it: RUN_DIR/step_NNNNNN with the
    full moments in optimizer.safetensors, no piece files, and its manifest; `latest` names it and
    the source run's train.jsonl comes along."""
    name = os.path.basename(src_ckpt)
    d = os.path.join(run_dir, name)
    os.makedirs(d)
    tensors = assemble(src_ckpt)
    moments = {k: v for k, v in tensors.items() if k.startswith("exp_avg")}
    if not moments:
        fail(f"{src_ckpt} holds no AdamW moments")
    write_safetensors(os.path.join(d, "optimizer.safetensors"), moments)
    for f in os.listdir(src_ckpt):
        if not f.startswith("pieces_") and f != "COMMITTED":
            shutil.copy(os.path.join(src_ckpt, f), os.path.join(d, f))
    files = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as h:
            blob = h.read()
        files[f] = {"bytes": len(blob), "crc32c": f"{crc32c(blob):08x}"}
    with open(os.path.join(d, "COMMITTED"), "w") as f:
        json.dump({"format": "tessel-checkpoint", "version": 1, "step": step, "files": files}, f,
                  indent=2)
    with open(os.path.join(run_dir, "latest"), "w") as f:
        f.write(name + "\n")
    shutil.copy(os.path.join(os.path.dirname(src_ckpt), "train.jsonl"), run_dir)


def bits(a):
    return a.tobytes()


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(vocab, n_positions=32, n_embd=24, n_layer=2, n_head=4))
    env = single_thread_env()

    def launch(layout, args):
        dp, tp, pp, zero = layout
        world = dp * tp * pp
        head = (mpi_prefix(mpirun) + ["-np", str(world)]) if world > 1 else []
        run(head + [tessel, "train"] + args +
            ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
             "--set", f"train.micro_batch={BATCH // dp}", "--set", f"parallel.zero_stage={zero}"],
            env=env)

    ref = os.path.join(work, "ref")
    launch(LAYOUTS[0], train_sets(config, os.path.join(work, "data"), 6, seq_len=15,
                                  extra=["checkpoint.interval=3", "train.grad_accum=2",
                                         "optim.grad_clip=0.5", "checkpoint.dir=" + ref]))
    saved = os.path.join(ref, "step_000003")
    want = assemble(saved)
    legacy = os.path.join(work, "legacy")
    make_legacy(saved, legacy, 3)
    if any(f.startswith("pieces_") for f in os.listdir(os.path.join(legacy, "step_000003"))):
        fail("the older checkpoint still holds piece files")

    problems = []
    for layout in LAYOUTS:
        what = "(dp {}, tp {}, pp {}) ZeRO-{}".format(*layout)
        tag = "dp{}_tp{}_pp{}_zero{}".format(*layout)
        # Loaded: one skipped step, then the state as loaded is the step-4 checkpoint.
        d = os.path.join(work, "loaded_" + tag)
        shutil.copytree(legacy, d)
        launch(layout, ["--resume", d, "--set", "train.steps=4", "--set", "fault.nan_at_step=4"])
        with open(os.path.join(d, "train.jsonl")) as f:
            recs = [r for r in map(json.loads, f) if r.get("step", 0) > 3]
        if len(recs) != 1 or recs[0]["step"] != 4 or not recs[0].get("skipped"):
            fail(f"{what}: expected one skipped step 4 after resuming, got {recs}")
        got = assemble(os.path.join(d, "step_000004"))
        if sorted(got) != sorted(want):
            fail(f"{what}: the resumed checkpoint holds {sorted(set(got) ^ set(want))} unlike "
                 f"the one it resumed")
        differ = [n for n in sorted(want) if got[n][0] != want[n][0] or
                  bits(got[n][1]) != bits(want[n][1])]
        if differ:
            problems.append(f"{what}: loaded from the older checkpoint, {len(differ)} of "
                            f"{len(want)} tensors differ from one rank's (first: {differ[0]})")
        moments = sum(1 for n in want if n.startswith("exp_avg"))
        print(f"{what}: loaded {len(want) - moments} parameters and {moments} moments "
              f"{'bit for bit' if not differ else 'WITH DIFFERENCES'}")
        # Continued: steps 4-6 follow the uninterrupted run.
        d = os.path.join(work, "continued_" + tag)
        shutil.copytree(legacy, d)
        launch(layout, ["--resume", d])
        a, b = losses(ref), losses(d)
        if layout == LAYOUTS[0]:
            for s in (4, 5, 6):
                if a[s] != b.get(s):
                    problems.append(f"{what}: step {s} loss {b.get(s)!r} after resuming the older "
                                    f"checkpoint, uninterrupted {a[s]!r} (one rank: bitwise)")
            print(f"{what}: steps 4-6 equal the uninterrupted run's bit for bit")
        else:
            worst = compare_losses(ref, d, what, 6)
            print(f"{what}: steps 4-6 within {worst:.1e} of the uninterrupted run")
    if problems:
        fail("\n".join(problems))
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
