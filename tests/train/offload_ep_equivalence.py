#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory offload composed with expert parallelism (docs/MEMORY.md, "With expert parallelism"):
`mpirun -np N tessel train --ep 2` with ZeRO, each rank's shards of the dense parameters (over dp)
and of its experts (over their own expert-dp group) in one chunk layout, equals the same run in
memory bit for bit: every step's loss and gradient norm, and the checkpoints' bytes (the model and
every rank's piece file). The model is train.ep_equivalence's GPT-2-MoE (2 blocks, both MoE, 4
experts, top-2 with capacity drops), sequences of 13, two micro-batches per step and clipping.
- ZeRO-3 at np 4 (experts' group of 2): the experts' parameter, gradient and moments' shards are
  chunks next to the dense units' (the placement names each MoE layer's experts), under budgets
  that leave chunks in the device, host and NVMe tiers, with NVMe read and written every step;
  its step-3 checkpoint resumes offloaded at np 4 on the in-memory run's trajectory, and the
  in-memory checkpoint resumes offloaded likewise;
- ZeRO-2 at np 2 (every rank its experts' group alone): the experts' gradient and moments'
  shards in chunks; ZeRO-1 at np 4: the experts' moments' shards (their all-reduced buckets stay
  plain memory); ZeRO-2 at np 2 in bf16 too (the replicas' 16-bit copies in chunks, experts'
  included);
- ZeRO-2 at np 2 with 8 MoE blocks of wide experts (FFN 2800: a rank's experts in 16 buckets of
  at most 1 MiB, in 9 gradient chunks), one chunk in the device tier and three in the host
  tier: the first expert buckets' gradient shards have gone down to NVMe by the time the last is
  reduced, so the 1 / ep scaling after the reductions must hold each shard's chunk while it writes
  it (without the hold the offloaded run stops with `storage of 1126400 bytes is released`;
  with the model of the cases above its one expert bucket is still in memory and the test passed
  without the hold);
- --ep 2 with --pp 2 at np 4 (dp 2 inside each stage): ZeRO-3 1F1B in f32 and ZeRO-2 GPipe in
  bf16, each stage's dense and expert shards in chunks; --ep 2 with --tp 2 at np 4 (a GPT-2-MoE
  whose first block is dense, so tp's plan splits its MLP): ZeRO-3 with --sp in f32 and ZeRO-2
  with --etp in bf16, each rank's shards of its tp pieces and of its experts in chunks; every one
  with NVMe read and written every step, the records and both checkpoints bitwise the in-memory
  run's.
Usage: offload_ep_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, HERE)
from offload_runs import check_tiers, offload_sets, same_checkpoint, same_records  # noqa: E402
from tessel_runs import (fail, mpi_prefix, prepare_workdir, run, seed_resume,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)
from ep_equivalence import moe_config  # noqa: E402

STEPS, SAVE = 6, 3
# ZeRO-3: 40 KiB holds the largest shard (an MoE layer's experts at np 2, 37824 bytes); ZeRO-1/2:
# a bucket's shard (the experts' whole bucket at np 2, 75648 bytes).
CHUNK = {3: 40 << 10, 2: 80 << 10, 1: 80 << 10}
# Wide experts in 8 blocks: a chunk holds an expert bucket's shard (at most 1 MiB, the bucket size).
WIDE_FFN, WIDE_LAYERS, WIDE_CHUNK = 2800, 8, 1100 << 10


def expert_lines(out, what, pattern):
    """The placement's lines of the experts' shards (rank 0's), at least one per MoE layer."""
    lines = re.findall(r"^  (" + pattern + r") \(this rank's shard\): (.*)$", out, re.M)
    if not lines:
        fail(f"{what}: no expert shard in the placement:\n{out[-3000:]}")
    return lines


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), moe_config(vocab))
    env = single_thread_env()

    def common(np_, stage):
        return ["train"] + train_sets(
            config, os.path.join(work, "data"), STEPS, seq_len=13,
            extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}",
                   "train.micro_batch=3", f"train.global_batch={6 * np_}",
                   "optim.grad_clip=0.05", "optim.weight_decay=0.1",
                   f"parallel.zero_stage={stage}"]) + ["--ep", "2"]

    def nvme(tag):
        d = os.path.join(work, "nvme_" + tag)
        os.makedirs(d)
        return d

    # --ep 2 --pp 2 (dp 2 at np 4): each stage's rank offloads its ZeRO shards of the stage's dense
    # parameters and of the stage's experts (one MoE layer a stage), NVMe read and written every
    # step after the first.
    # --ep 2 --tp 2 likewise (dp 2 inside each tp rank's group): each rank its ZeRO shards of its
    # tp pieces and of its experts (whole, or with --etp their FFN columns), with --sp too.
    # Block 0 dense (tp's plan splits its MLP), block 1 MoE.
    half = write_json(os.path.join(work, "half_moe.json"), moe_config(vocab, moe_every=2))
    for stage, flags, precision, host, device, chunk, desc in (
            (3, ["--pp", "2", "--schedule", "1f1b"], "fp32", 4, 3, 40, "--pp 2 1F1B"),
            (2, ["--pp", "2", "--schedule", "gpipe"], "bf16", 3, 1, 40, "--pp 2 GPipe"),
            (3, ["--tp", "2", "--sp", "--set", f"model.config={half}"], "fp32", 4, 3, 40,
             "--tp 2 --sp"),
            (2, ["--tp", "2", "--etp", "--set", f"model.config={half}"], "bf16", 3, 2, 20,
             "--tp 2 --etp")):
        what = f"--ep 2 {desc} at np 4, ZeRO-{stage} {precision} offloaded"
        tag = f"ep_{flags[0][2:]}_zero{stage}"
        mpi = mpi_prefix(mpirun) + ["-np", "4", tessel]
        layout = common(4, stage) + flags + ["--set", f"train.precision={precision}"]
        ref, off = (os.path.join(work, f"{k}_{tag}") for k in ("memory", "offload"))
        run(mpi + layout + ["--set", "checkpoint.dir=" + ref], env=env)
        run(mpi + layout + ["--set", "checkpoint.dir=" + off] +
            offload_sets(nvme(tag), host, device, chunk << 10), env=env)
        same_records(ref, off, what, STEPS)
        io = [(r["offload"]["nvme_read_bytes"], r["offload"]["nvme_write_bytes"])
              for r in step_records(off)]
        if len(io) != STEPS or not all(rd > 0 and wr > 0 for rd, wr in io[1:]):
            fail(f"{what}: a step after the first without NVMe reads and writes: {io}")
        files = [f for step in (SAVE, STEPS) for f in same_checkpoint(ref, off, step, what)]
        print(f"{what}: {STEPS} steps' losses and norms bitwise the in-memory run's, NVMe read "
              f"and written every step; checkpoints at steps {SAVE} and {STEPS} byte for byte "
              f"({len(files)} files)")

    # Wide experts: the expert gradient shards' chunks leave memory before they are scaled.
    wide = write_json(os.path.join(work, "wide.json"), moe_config(vocab, n_inner=WIDE_FFN,
                                                                n_layer=WIDE_LAYERS))
    wide_sets = ["--set", f"model.config={wide}", "--set", "parallel.bucket_mb=1"]
    mpi = mpi_prefix(mpirun) + ["-np", "2", tessel]
    ref, off = (os.path.join(work, f"{k}_wide") for k in ("memory", "offload"))
    run(mpi + common(2, 2) + wide_sets + ["--set", "checkpoint.dir=" + ref], env=env)
    out = run(mpi + common(2, 2) + wide_sets + ["--set", "checkpoint.dir=" + off] +
              offload_sets(nvme("wide"), 3, 1, WIDE_CHUNK), env=env).stdout
    what = "--ep 2 at np 2, ZeRO-2, wide experts offloaded"
    shards = expert_lines(out, what, r"expert bucket \d+")
    if len(shards) < 3:
        fail(f"{what}: expected three expert buckets or more, got {shards}")
    same_records(ref, off, what, STEPS)
    io = [(r["offload"]["nvme_read_bytes"], r["offload"]["nvme_write_bytes"])
          for r in step_records(off)]
    if len(io) != STEPS or not all(rd > 0 and wr > 0 for rd, wr in io):
        fail(f"{what}: a step without NVMe reads and writes: {io}")
    files = same_checkpoint(ref, off, STEPS, what)
    print(f"{what}: {STEPS} steps bitwise the in-memory run's, checkpoint byte for byte "
          f"({', '.join(files)}); rank 0's expert shards {shards}")

    bf16 = ["--set", "train.precision=bf16"]
    for np_, stage, host, device, layers, extra in (
            (4, 3, 4, 3, r"h\.\d\.moe\.experts", []), (2, 2, 3, 1, r"expert bucket \d+", []),
            (4, 1, 3, 1, r"expert bucket \d+", []), (2, 2, 3, 1, r"expert bucket \d+", bf16)):
        mpi = mpi_prefix(mpirun) + ["-np", str(np_), tessel]
        tag = f"np{np_}_zero{stage}" + ("_bf16" if extra else "")
        ref, off = (os.path.join(work, f"{k}_{tag}") for k in ("memory", "offload"))
        run(mpi + common(np_, stage) + extra + ["--set", "checkpoint.dir=" + ref], env=env)
        swap = nvme(tag)
        out = run(mpi + common(np_, stage) + extra + ["--set", "checkpoint.dir=" + off] +
                  offload_sets(swap, host, device, CHUNK[stage]), env=env).stdout
        what = f"--ep 2 at np {np_}, ZeRO-{stage}{' bf16' if extra else ''} offloaded"
        shards = expert_lines(out, what, layers)
        same_records(ref, off, what, STEPS)
        if stage == 3:
            check_tiers(off, what, STEPS)
        if sorted(os.listdir(swap)) != [f"rank{r}" for r in range(np_)]:
            fail(f"{what}: {swap} holds {sorted(os.listdir(swap))}: expected a folder per rank")
        for step in (SAVE, STEPS):
            files = same_checkpoint(ref, off, step, what)
        print(f"{what}: {STEPS} steps' losses and norms bitwise the in-memory run's; checkpoints "
              f"at steps {SAVE} and {STEPS} byte for byte ({', '.join(files)}); rank 0's expert "
              f"shards {shards}")
        if stage != 3:
            continue
        # Resume offloaded, from the offloaded run's checkpoint and from the in-memory one's: the
        # in-memory run's trajectory, checkpoint included.
        for src, name in ((off, "offloaded"), (ref, "in-memory")):
            r = os.path.join(work, f"resume_{name}_{tag}")
            seed_resume(src, f"step_{SAVE:06d}", r)
            run(mpi + ["train", "--resume", r, "--ep", "2", "--set",
                       f"parallel.zero_stage={stage}"] +
                offload_sets(nvme("resume_" + name), host, device, CHUNK[stage]), env=env)
            same_records(ref, r, f"the {name} checkpoint resumed offloaded", STEPS,
                         first=SAVE + 1)
            same_checkpoint(ref, r, STEPS, f"the {name} checkpoint resumed offloaded")
        print(f"{what}: the offloaded and the in-memory step-{SAVE} checkpoints resume offloaded "
              f"bitwise on the uninterrupted trajectory")


if __name__ == "__main__":
    main()
