#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory offload composed with data parallelism (docs/MEMORY.md, "With data parallelism"):
`mpirun -np 2 tessel train --dp 2` with each rank's ZeRO shards in chunks equals the same run in
memory bit for bit: every step's loss and gradient norm, and the checkpoints' bytes (the model and
every rank's piece file). ZeRO-3 under budgets that leave chunks in the device, host and NVMe
tiers (also with full recomputation, whose replay reads the gathered block); ZeRO-1, whose
all-reduced gradient bucket is a chunk too (written by backward and the all_reduce in the device
tier, read by the update in the host tier, with both moments' chunks the host tier's row), and
ZeRO-2, whose gradient shard is the row's third chunk (ZeRO-2/3's gradient shards live in chunks,
written by the reduce_scatter in the host tier); ZeRO-1 again on a GPT-2 of C = 129 with 1 MiB
buckets whose chunks need all three tiers; ZeRO-2 and ZeRO-3 on such a GPT-2 of 6 blocks with
their buckets' full gradient buffers in chunks too (held in the device tier by backward and the reduce_scatter,
carried through the host tier and NVMe between the two micro-batches, freed once reduced). A
ZeRO-3 checkpoint of the offloaded run
resumes at one rank in memory exactly as the in-memory run's does, and the in-memory run's
resumes offloaded at dp 2 exactly on its trajectory; a host budget below the update's row (four
chunks at ZeRO-3, three at ZeRO-2 and ZeRO-1: parameter shard, gradient shard or bucket, both
moments) is refused
before any step, as is plain dp (zero_stage 0). Each offloaded run's start-up computes
(or, with model.init_from, reads) every parameter shard straight into its chunk. A GPT-2 with C = 33, 3 heads, 3 blocks, sequences of 13, two
micro-batches per step and clipping.

Usage: offload_dp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import offload_sets, same_checkpoint  # noqa: E402
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run, seed_resume,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

# ZeRO-3: 32 KiB chunks hold the largest unit's shard (a block's, 6749 floats); 4 chunks per kind.
# ZeRO-1/2: one bucket (the model is far below a MiB), its moments' (and ZeRO-2's gradient) shards
# of 24800 floats each; ZeRO-1's whole all-reduced bucket (49600 floats) is a chunk too.
CHUNK = {3: 32 << 10, 2: 128 << 10, 1: 256 << 10}
STEPS, SAVE = 8, 4


def same_records(ref, dir_, what, first=1):
    a = [(r["step"], r["loss"], r["grad_norm"]) for r in step_records(ref) if r["step"] >= first]
    b = [(r["step"], r["loss"], r["grad_norm"]) for r in step_records(dir_) if r["step"] >= first]
    if len(a) != STEPS - first + 1 or a != b:
        fail(f"{what}: (step, loss, grad norm) {b} differ from the in-memory run's {a}")


def check_tiers(dir_, what):
    """Every tier held chunks and NVMe was read and written: the budgets forced all of them."""
    recs = [r["offload"] for r in step_records(dir_)]
    if "ZeRO-3" not in what:  # two moment chunks, both in the host tier's row
        chunk = CHUNK[1] if "ZeRO-1" in what else CHUNK[2]  # the gradient chunks are free
        if len(recs) != STEPS or not all(r["host_bytes"] == 2 * chunk for r in recs):
            fail(f"{what}: the moments' two chunks are not in the host tier: {recs}")
        return
    if len(recs) != STEPS or not all(r["device_bytes"] > 0 and r["host_bytes"] > 0 and
                                     r["nvme_bytes"] > 0 for r in recs):
        fail(f"{what}: some step did not hold chunks in every tier: {recs}")
    if not any(r["nvme_read_bytes"] > 0 for r in recs) or not any(
            r["nvme_write_bytes"] > 0 for r in recs):
        fail(f"{what}: no NVMe traffic: {recs}")


def placement(out, what):
    """The placement block `tessel train` prints for an offloaded run (rank 0's chunks)."""
    m = re.search(r"^memory offload: .*\n(?:  .*\n)*", out, re.M)
    if not m:
        fail(f"{what}: no placement printed:\n{out[-3000:]}")
    return m.group(0)


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    cfg = gpt2_config(vocab, n_positions=17, n_embd=33, n_layer=3, n_head=3)
    config = write_json(os.path.join(work, "config.json"), cfg)
    common = ["train"] + train_sets(
        config, os.path.join(work, "data"), STEPS, seq_len=13,
        extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}", "train.micro_batch=3",
               "train.global_batch=12", "optim.grad_clip=0.05", "optim.weight_decay=0.1"])
    env = single_thread_env()
    mpi = mpi_prefix(mpirun) + ["-np", "2", tessel]
    dp2 = ["--dp", "2"]

    # A budget below one step's working set is refused before any step, naming the smallest.
    d = os.path.join(work, "too_small")
    nvme = os.path.join(work, "nvme_too_small")
    os.makedirs(nvme)
    for stage, host_chunks, row in ((3, 3, 4), (2, 2, 3), (1, 2, 3)):
        p = subprocess.run(mpi + common + dp2 +
                           ["--set", f"parallel.zero_stage={stage}", "--set",
                            f"checkpoint.dir={d}{stage}"] +
                           offload_sets(nvme, host_chunks, 3, CHUNK[stage]), env=env,
                           capture_output=True, text=True)
        m = re.search(r"smallest host budget that works is (\d+) bytes", p.stdout + p.stderr)
        if p.returncode == 0 or not m or int(m.group(1)) != row * CHUNK[stage]:
            fail(f"a host budget of {host_chunks} chunks under ZeRO-{stage}: rc {p.returncode}, "
                 f"{p.stderr[-600:]}")

    # Plain dp (every rank holding whole moments) is refused with the stages that work.
    p = subprocess.run(mpi + common + dp2 + ["--set", "parallel.zero_stage=0", "--set",
                       "checkpoint.dir=" + os.path.join(work, "zero0")] +
                       offload_sets(nvme, 3, 3, CHUNK[3]), env=env, capture_output=True, text=True)
    if p.returncode == 0 or "needs parallel.zero_stage 1, 2 or 3" not in p.stdout + p.stderr:
        fail(f"offload with dp 2 and zero_stage 0: rc {p.returncode}, {p.stderr[-600:]}")

    for stage, host_chunks, device_chunks, recompute in ((3, 4, 3, "none"), (1, 3, 1, "none"),
                                                         (2, 3, 1, "none"),
                                                         (3, 4, 3, "full")):
        tag = f"zero{stage}" + ("" if recompute == "none" else "_recompute_" + recompute)
        ref = os.path.join(work, f"memory_{tag}")
        off = os.path.join(work, f"offload_{tag}")
        zero = ["--set", f"parallel.zero_stage={stage}", "--set", f"train.recompute={recompute}"]
        run(mpi + common + dp2 + zero +
            ["--set", "checkpoint.dir=" + ref], env=env)
        nvme = os.path.join(work, f"nvme_{tag}")
        os.makedirs(nvme)
        out = run(mpi + common + dp2 + zero + ["--set", "checkpoint.dir=" + off] +
                  offload_sets(nvme, host_chunks, device_chunks, CHUNK[stage]), env=env).stdout
        what = f"dp 2 ZeRO-{stage} offloaded" + ("" if recompute == "none" else
                                                  f" (recompute {recompute})")
        if stage == 3 and recompute == "none":
            # --build-only lays the chunks out as the run does (and trains nothing).
            b = os.path.join(work, "build_only_zero3")
            built = run(mpi + common + dp2 + zero + ["--build-only", "--set", "checkpoint.dir=" +
                        b] + offload_sets(nvme, host_chunks, device_chunks, CHUNK[stage]),
                        env=env).stdout
            if placement(built, "--build-only") != placement(out, what) or step_records(b):
                fail(f"--build-only under dp 2 ZeRO-3 offload: placement\n"
                     f"{placement(built, '--build-only')}\nvs the run's\n{placement(out, what)}")
            print("--build-only under dp 2 ZeRO-3 offload lays out the run's chunks")
        # The placement lists the gradients' chunks: ZeRO-2/3's shards, ZeRO-1's buckets.
        if re.search(r"^  grad: ", out, re.M) is None:
            fail(f"{what}: the gradients' chunks are missing from the placement:\n{out[-3000:]}")
        same_records(ref, off, what)
        check_tiers(off, what)
        if sorted(os.listdir(nvme)) != ["rank0", "rank1"] or any(
                os.listdir(os.path.join(nvme, r)) for r in ("rank0", "rank1")):
            fail(f"{what}: {nvme} holds {sorted(os.listdir(nvme))}: expected one empty folder "
                 f"per rank (the swap files are unlinked)")
        for step in (SAVE, STEPS):
            files = same_checkpoint(ref, off, step, what)
        print(f"{what}: {STEPS} steps' losses and norms bitwise the in-memory run's; checkpoints "
              f"at steps {SAVE} and {STEPS} byte for byte ({', '.join(files)})")
        if stage != 3 or recompute != "none":
            continue
        # The offloaded run's checkpoint resumes in memory at one rank as the in-memory one's.
        outs = []
        for src, name in ((ref, "memory"), (off, "offload")):
            r = os.path.join(work, f"resume_{name}_zero3_at_1")
            seed_resume(src, f"step_{SAVE:06d}", r)
            run([tessel, "train", "--resume", r, "--set", "memory.device_budget=",
                 "--set", "memory.nvme_dir="], env=env)
            outs.append(r)
        same_records(outs[0], outs[1], "the offloaded dp 2 checkpoint resumed at one rank",
                     first=SAVE + 1)
        same_checkpoint(outs[0], outs[1], STEPS, "the offloaded dp 2 checkpoint resumed at one rank")
        # The in-memory run's checkpoint resumes offloaded at dp 2 on its own trajectory.
        r = os.path.join(work, "resume_memory_zero3_offloaded")
        seed_resume(ref, f"step_{SAVE:06d}", r)
        nvme = os.path.join(work, "nvme_resume")
        os.makedirs(nvme)
        run(mpi + ["train", "--resume", r] + dp2 + zero +
            offload_sets(nvme, host_chunks, device_chunks, CHUNK[stage]), env=env)
        same_records(ref, r, "the in-memory dp 2 checkpoint resumed offloaded", first=SAVE + 1)
        same_checkpoint(ref, r, STEPS, "the in-memory dp 2 checkpoint resumed offloaded")
        print("ZeRO-3 checkpoints: offloaded -> one rank in memory, and in memory -> offloaded "
              "at dp 2, both bitwise on the uninterrupted trajectory")

    # ZeRO-1 with its all-reduced buckets in chunks that leave memory: C = 129 with 1 MiB buckets
    # (three), chunks of 1 MiB: seven chunks (three of gradients) for tiers of three and three, so
    # every step reads and writes NVMe.
    cfg129 = write_json(os.path.join(work, "config129.json"),
                        gpt2_config(vocab, n_positions=17, n_embd=129, n_layer=3, n_head=3))
    z1 = ["train"] + train_sets(
        cfg129, os.path.join(work, "data"), STEPS, seq_len=13,
        extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}", "train.micro_batch=3",
               "train.global_batch=12", "optim.grad_clip=0.05", "optim.weight_decay=0.1",
               "parallel.bucket_mb=1", "parallel.zero_stage=1"])
    ref, off = (os.path.join(work, f"zero1_buckets_{k}") for k in ("memory", "offload"))
    nvme = os.path.join(work, "nvme_zero1_buckets")
    os.makedirs(nvme)
    run(mpi + z1 + dp2 + ["--set", "checkpoint.dir=" + ref], env=env)
    out = run(mpi + z1 + dp2 + ["--set", "checkpoint.dir=" + off] + offload_sets(nvme, 3, 3, 1 << 20),
              env=env).stdout
    what = "dp 2 ZeRO-1 offloaded, C = 129, chunks in every tier"
    grads = re.search(r"^  grad: (.*)$", out, re.M)
    if not grads or grads.group(1).split() != ["3", "none"]:
        fail(f"{what}: expected three gradient chunks, free between steps:\n{placement(out, what)}")
    same_records(ref, off, what)
    recs = [r["offload"] for r in step_records(off)]
    if not all(r["nvme_read_bytes"] > 0 and r["nvme_write_bytes"] > 0 for r in recs[1:]):
        fail(f"{what}: no NVMe traffic: {recs}")
    for step in (SAVE, STEPS):
        same_checkpoint(ref, off, step, what)
    print(f"{what}: bitwise the in-memory run; checkpoints byte for byte")

    # ZeRO-2 and ZeRO-3 with their buckets' full gradient buffers in chunks (each fits one): on a
    # GPT-2 of C = 129 and 6 blocks (more buffer chunks than the device tier's three) with two
    # micro-batches per step, every bucket's buffer holds its sum from the first micro-batch to
    # the reduce_scatter of the second, so the buffers leave the device tier (three of them, and
    # ZeRO-3's three parameter-shard chunks) for the host and NVMe and come back; each retired
    # buffer's chunk is freed, not written.
    cfg6 = write_json(os.path.join(work, "config129x6.json"),
                      gpt2_config(vocab, n_positions=17, n_embd=129, n_layer=6, n_head=3))
    for stage, host_chunks, device_chunks in ((2, 3, 3), (3, 4, 6)):
        zs = ["train"] + train_sets(
            cfg6, os.path.join(work, "data"), STEPS, seq_len=13,
            extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}",
                   "train.micro_batch=3", "train.global_batch=12", "optim.grad_clip=0.05",
                   "optim.weight_decay=0.1", "parallel.bucket_mb=1",
                   f"parallel.zero_stage={stage}"])
        ref, off = (os.path.join(work, f"zero{stage}_buckets_{k}") for k in ("memory", "offload"))
        nvme = os.path.join(work, f"nvme_zero{stage}_buckets")
        os.makedirs(nvme)
        run(mpi + zs + dp2 + ["--set", "checkpoint.dir=" + ref], env=env)
        out = run(mpi + zs + dp2 + ["--set", "checkpoint.dir=" + off] +
                  offload_sets(nvme, host_chunks, device_chunks, 1 << 20), env=env).stdout
        what = f"dp 2 ZeRO-{stage} offloaded, C = 129 x 6, full gradient buckets in chunks"
        full = re.search(r"^  grad_bucket: (.*)$", out, re.M)
        if not full or full.group(1).split()[-1] != "none" or "stay in plain memory" in out:
            fail(f"{what}: expected the full buffers' chunks, free between steps:\n"
                 f"{placement(out, what)}")
        if int(full.group(1).split()[0]) <= device_chunks - (3 if stage == 3 else 0):
            fail(f"{what}: the device tier holds every full buffer: {full.group(1)}")
        same_records(ref, off, what)
        recs = [r["offload"] for r in step_records(off)]
        if len(recs) != STEPS or not all(r["d2h_bytes"] > 0 and r["h2d_bytes"] > 0 and
                                         r["nvme_read_bytes"] > 0 and r["nvme_write_bytes"] > 0
                                         for r in recs):
            fail(f"{what}: some step moved no chunk between all three tiers: {recs}")
        for step in (SAVE, STEPS):
            files = same_checkpoint(ref, off, step, what)
        print(f"{what}: bitwise the in-memory run (losses, norms, checkpoints: "
              f"{', '.join(files)}); every step moved chunks device <-> host <-> NVMe")

    # Start-up streams from a file too: with model.init_from each rank reads its parameter
    # shards' parts straight into their chunks (the moments start there as zeros), and the run
    # equals the in-memory one started from the same file.
    src = os.path.join(work, "memory_zero3", f"step_{STEPS:06d}")
    zero3 = ["--set", "parallel.zero_stage=3", "--set", "model.init_from=" + src]
    ref, off = (os.path.join(work, f"init_from_{k}_zero3") for k in ("memory", "offload"))
    run(mpi + common + dp2 + zero3 + ["--set", "checkpoint.dir=" + ref], env=env)
    nvme = os.path.join(work, "nvme_init_from")
    os.makedirs(nvme)
    run(mpi + common + dp2 + zero3 + ["--set", "checkpoint.dir=" + off] +
        offload_sets(nvme, 4, 3, CHUNK[3]), env=env)
    what = "dp 2 ZeRO-3 offloaded from model.init_from"
    same_records(ref, off, what)
    check_tiers(off, what)
    for step in (SAVE, STEPS):
        same_checkpoint(ref, off, step, what)
    print(f"{what}: bitwise the in-memory run from the same file")


if __name__ == "__main__":
    main()
