#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ZeRO-1/2's 16-bit compute copies in chunks under memory offload (docs/MEMORY.md, "Mixed
precision"): at dp 2 with bf16 or fp16, each rank keeps the 16-bit copies of its replicated
parameters in a param16 chunk list laid out unit by unit, holds a unit's copies in the device tier
around its forward and backward, and rounds them again after every update's all_gather. The runs
equal the in-memory runs of the same layout bit for bit: every step's loss, gradient norm, loss
scale and overflow flag, and the checkpoints' bytes. The copies' chunks are spread over all three
tiers (the device tier holds one step's working set of them, the rest spill), the step records'
accounting is checked every step, and a device tier one chunk short of that working set is refused
before any step, naming the smallest that works (probed at ZeRO-2: the copies' layout is the
units', the same at both stages). fp16 starts from a loss scale that overflows, so
skipped steps are compared too. An in-memory bf16 checkpoint resumes offloaded on its trajectory
(the copies rounded from the loaded replicas). A GPT-2 with C = 128, 4 heads, 6 blocks (1.2M
parameters: five 1 MiB buckets, so the moments' shards are many chunks too), sequences of 13, 12
sequences per step (two micro-batches of 3 per rank) and clipping.

Usage: offload_dp_copies_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import offload_sets, precision_records, same_checkpoint  # noqa: E402
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         seed_resume, single_thread_env, step_records, train_sets, write_json)

# The largest tensor in chunks is a bucket's moment shard (1 MiB of f32 over 2 ranks, padded).
CHUNK = 512 << 10
HOST = {1: 2, 2: 3}  # the update's row: both moments' shards (and the gradient shard at stage 2)
STEPS, SAVE = 6, 3
FP16_SCALE = 1 << 18  # the first fp16 steps overflow and are skipped


def copies_placement(stdout, what):
    """The param16 line of the placement a rank printed: {tier: chunks}."""
    m = re.search(r"^\s*param16:(( \d+ (device|host|nvme|none))+)\s*$", stdout, re.M)
    if not m:
        fail(f"{what}: no param16 chunk list in the placement:\n{stdout[-3000:]}")
    return {t: int(n) for n, t in re.findall(r"(\d+) (\w+)", m.group(1))}


def working_set(probe, env, what, nvme, host_chunks):
    """The device chunks PROBE's refusal at one chunk names; one chunk short of it is refused too,
    naming the same budget."""
    os.makedirs(nvme)
    p = subprocess.run(probe + offload_sets(nvme, host_chunks, 1, CHUNK), env=env,
                       capture_output=True, text=True)
    m = re.search(r"smallest device budget that works is (\d+) bytes", p.stdout + p.stderr)
    if p.returncode == 0 or not m or "16-bit copies" not in p.stdout + p.stderr:
        fail(f"{what}: a device tier of one chunk was not refused for the copies' working "
             f"set: rc {p.returncode}\n{(p.stdout + p.stderr)[-1500:]}")
    device = int(m.group(1)) // CHUNK
    if device < 2:
        fail(f"{what}: working set of {device} chunks; the test needs the copies to spill")
    p = subprocess.run(probe + offload_sets(nvme, host_chunks, device - 1, CHUNK), env=env,
                       capture_output=True, text=True)
    if p.returncode == 0 or f"is {device * CHUNK} bytes" not in p.stdout + p.stderr:
        fail(f"{what}: a device tier of {device - 1} chunks was not refused naming "
             f"{device * CHUNK} bytes: rc {p.returncode}\n{(p.stdout + p.stderr)[-1500:]}")
    return device


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    cfg = gpt2_config(vocab, n_positions=17, n_embd=128, n_layer=6, n_head=4)
    config = write_json(os.path.join(work, "config.json"), cfg)
    common = ["train"] + train_sets(
        config, os.path.join(work, "data"), STEPS, seq_len=13,
        extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}", "train.micro_batch=3",
               "train.global_batch=12", "optim.grad_clip=0.05", "optim.weight_decay=0.1",
               "parallel.bucket_mb=1", f"train.loss_scale_init={FP16_SCALE}"])
    env = single_thread_env()
    mpi = mpi_prefix(mpirun) + ["-np", "2", tessel] + common + ["--dp", "2"]

    device = None  # the copies' working set in chunks
    for stage, precision in ((2, "bf16"), (2, "fp16"), (1, "bf16")):
        tag = f"zero{stage}_{precision}"
        what = f"dp 2 ZeRO-{stage} {precision} offloaded"
        zero = ["--set", f"parallel.zero_stage={stage}", "--set", f"train.precision={precision}"]
        # The device tier must hold a unit's copies with the embeddings': one chunk less is
        # refused before any step, naming the working set (the copies' layout is the units',
        # the same at both stages: probed once).
        if device is None:
            probe = mpi + zero + ["--set", "checkpoint.dir=" + os.path.join(work, "probe")]
            device = working_set(probe, env, what, os.path.join(work, "nvme_probe"), HOST[stage])
        ref = os.path.join(work, f"memory_{tag}")
        run(mpi + zero + ["--set", "checkpoint.dir=" + ref], env=env)
        if precision == "fp16" and not any(r[4] for r in precision_records(ref)):
            fail(f"fp16 from loss scale {FP16_SCALE}: no step overflowed, {precision_records(ref)}")
        off = os.path.join(work, f"offload_{tag}")
        nvme = os.path.join(work, f"nvme_{tag}")
        os.makedirs(nvme)
        out = run(mpi + zero + ["--set", "checkpoint.dir=" + off] +
                  offload_sets(nvme, HOST[stage], device, CHUNK), env=env).stdout
        a, b = precision_records(ref), precision_records(off)
        if len(a) != STEPS or a != b:
            fail(f"{what}: (step, loss, grad norm, loss scale, overflow, skipped) {b} differ "
                 f"from the in-memory run's {a}")
        for step in (SAVE, STEPS):
            same_checkpoint(ref, off, step, what)
        # The copies are chunks of their own, and they spill out of the memory tiers.
        tiers = copies_placement(out, what)
        if sum(tiers.values()) < device + 1 or not tiers.get("nvme"):
            fail(f"{what}: the copies' chunks {tiers} do not spill past the device tier "
                 f"({device} chunks) to NVMe")
        recs = [r["offload"] for r in step_records(off)]
        if not any(r["nvme_read_bytes"] > 0 and r["h2d_bytes"] > 0 for r in recs):
            fail(f"{what}: no chunk came up from NVMe into the device tier: {recs}")
        print(f"{what}: {STEPS} steps' losses, norms and scales and the checkpoints at steps "
              f"{SAVE} and {STEPS} bitwise the in-memory run's; the copies in {tiers} chunks, "
              f"the device tier at its working set of {device} ({device - 1} refused)")
        if (stage, precision) != (2, "bf16"):
            continue
        # The in-memory checkpoint resumes offloaded: the copies are rounded from the loaded
        # replicas.
        r = os.path.join(work, f"resume_{tag}")
        seed_resume(ref, f"step_{SAVE:06d}", r)
        nvme = os.path.join(work, f"nvme_resume_{tag}")
        os.makedirs(nvme)
        run(mpi_prefix(mpirun) + ["-np", "2", tessel, "train", "--resume", r, "--dp", "2"] +
            offload_sets(nvme, HOST[stage], device, CHUNK), env=env)
        a, b = precision_records(ref, SAVE + 1), precision_records(r, SAVE + 1)
        if len(a) != STEPS - SAVE or a != b:
            fail(f"{what}: resumed from the in-memory checkpoint, {b} differ from {a}")
        same_checkpoint(ref, r, STEPS, what + " resumed")
        print(f"{what}: the in-memory checkpoint of step {SAVE} resumed offloaded stays on its "
              "trajectory bitwise")


if __name__ == "__main__":
    main()
