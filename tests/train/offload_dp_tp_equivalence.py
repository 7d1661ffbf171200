#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory offload with data and tensor parallelism together (docs/MEMORY.md, "With data and tensor
parallelism"): `mpirun -np 4 tessel train --dp 2 --tp 2` with ZeRO, each rank's shards of its tp
pieces in chunks of its own, equals the same run in memory bit for bit: every step's loss and
gradient norm, and the checkpoints' bytes (the model and every rank's piece file). A GPT-2 with
C = 26, 2 heads, 5 blocks, sequences of 13, two micro-batches per step and clipping.
- ZeRO-3 under budgets that leave chunks in the device, host and NVMe tiers, NVMe read and
  written every step after the first, each rank's NVMe files in a folder of its own (rank0..3);
  its step-3 checkpoint resumes offloaded on the in-memory run's trajectory; in bf16 too;
- ZeRO-2 with sequence parallelism (tp sums the layer norms' gradients before the reduce-scatter);
- ZeRO-1 with its all-reduced buckets in chunks, and with sequence parallelism, whose tp sums
  after the all_reduce write inside the buckets: those stay plain memory (a note says so).
Usage: offload_dp_tp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import check_tiers, offload_sets, same_checkpoint, same_records  # noqa: E402
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run, seed_resume,  # noqa: E402
                         single_thread_env, train_sets, write_json)

STEPS, SAVE = 6, 3
SP = ["--set", "parallel.sequence_parallel=true"]
BF16 = ["--set", "train.precision=bf16"]


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(vocab, n_positions=17, n_embd=26, n_layer=5, n_head=2))
    env = single_thread_env()
    mpi = mpi_prefix(mpirun) + ["-np", "4", tessel]
    layout = ["--dp", "2", "--tp", "2"]

    def common(stage):
        return ["train"] + train_sets(
            config, os.path.join(work, "data"), STEPS, seq_len=13,
            extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}",
                   "train.micro_batch=3", "train.global_batch=12", "optim.grad_clip=0.05",
                   "optim.weight_decay=0.1", f"parallel.zero_stage={stage}"]) + layout

    # (stage, extra flags, chunk bytes, host chunks, device chunks): ZeRO-3's largest shard is a
    # block's tp piece over dp (under 16 KiB); ZeRO-2's gradient shard 50728 bytes; ZeRO-1's whole
    # bucket fits 256 KiB.
    cases = [(3, [], 16 << 10, 4, 3), (3, BF16, 16 << 10, 4, 3), (2, SP, 64 << 10, 3, 1),
             (1, [], 256 << 10, 3, 1), (1, SP, 256 << 10, 3, 1)]
    for stage, extra, chunk, host, device in cases:
        tag = f"zero{stage}" + ("_sp" if extra == SP else "_bf16" if extra == BF16 else "")
        what = f"dp 2 x tp 2 ZeRO-{stage}{' ' + extra[1] if extra else ''} offloaded"
        ref, off = (os.path.join(work, f"{k}_{tag}") for k in ("memory", "offload"))
        run(mpi + common(stage) + extra + ["--set", "checkpoint.dir=" + ref], env=env)
        swap = os.path.join(work, "nvme_" + tag)
        os.makedirs(swap)
        out = run(mpi + common(stage) + extra + ["--set", "checkpoint.dir=" + off] +
                  offload_sets(swap, host, device, chunk), env=env).stdout
        same_records(ref, off, what, STEPS)
        if stage == 3:
            check_tiers(off, what, STEPS)
        if sorted(os.listdir(swap)) != [f"rank{r}" for r in range(4)]:
            fail(f"{what}: {swap} holds {sorted(os.listdir(swap))}: expected a folder per rank")
        grads = re.search(r"^  grad: ", out, re.M) is not None
        note = "note: ZeRO-1's all-reduced gradient buckets stay in plain memory: tensor" in out
        if stage == 1 and (grads == (extra == SP) or note != (extra == SP)):
            fail(f"{what}: gradient chunks {grads}, plain-bucket note {note}:\n{out[-3000:]}")
        for step in (SAVE, STEPS):
            files = same_checkpoint(ref, off, step, what)
        print(f"{what}: {STEPS} steps' losses and norms bitwise the in-memory run's; checkpoints "
              f"at steps {SAVE} and {STEPS} byte for byte ({len(files)} files)")
        if stage != 3 or extra:
            continue
        r = os.path.join(work, "resume_" + tag)
        seed_resume(off, f"step_{SAVE:06d}", r)
        swap = os.path.join(work, "nvme_resume")
        os.makedirs(swap)
        run(mpi + ["train", "--resume", r, "--set", f"parallel.zero_stage={stage}"] + layout +
            offload_sets(swap, host, device, chunk), env=env)
        same_records(ref, r, "the offloaded dp x tp checkpoint resumed offloaded", STEPS,
                     first=SAVE + 1)
        same_checkpoint(ref, r, STEPS, "the offloaded dp x tp checkpoint resumed offloaded")
        print(f"{what}: its step-{SAVE} checkpoint resumes offloaded on the uninterrupted "
              f"trajectory")


if __name__ == "__main__":
    main()
