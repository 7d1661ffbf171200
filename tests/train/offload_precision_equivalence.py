#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Mixed precision under memory offload (docs/MEMORY.md, "Mixed precision"): bf16 and fp16 runs
whose 16-bit weight copies live in chunks of their own, offloaded across the device, host and NVMe
tiers, equal the same runs in memory bit for bit: every step's loss, gradient norm, loss scale and
overflow flag, and the checkpoints' bytes (the final parameters among them); bf16 with full
recomputation too, whose replay reads the kept copies. fp16 starts from a loss scale that
overflows, so the skipped steps and the halved scale are compared too. The in-memory bf16
checkpoint resumes offloaded on its own trajectory (the copies are rounded from the loaded
masters). Under dp 2 with ZeRO-2 and ZeRO-3, each rank's shards offloaded, the same. A host tier
below the update's row of five chunks (parameters, gradients, both moments and the copies') is
refused before any step, naming that budget. A GPT-2 with C = 33, 3 heads, 3 blocks, sequences
of 13, 12 sequences per step (four micro-batches of 3 on one process, two per rank at dp 2) and
clipping.

Usage: offload_precision_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import offload_sets, precision_records, same_checkpoint  # noqa: E402
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run, seed_resume,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

# One process: the largest tensor (the embedding, 257 x 33 f32, 33924 bytes) fits a chunk. dp 2: as
# offload_dp_equivalence.py (ZeRO-3's unit shards, ZeRO-2's one bucket of moments).
CHUNK = 36 << 10
DP_CHUNK = {3: 32 << 10, 2: 128 << 10}
DP_TIERS = {3: (4, 3), 2: (3, 1)}  # host chunks (the update's row), device chunks
STEPS, SAVE = 8, 4
# 2^18: the first two steps' fp16 gradients overflow, each skip halves the scale, then it trains.
FP16_SCALE = 1 << 18


def same_records(ref, d, what, first=1):
    a, b = precision_records(ref, first), precision_records(d, first)
    if len(a) != STEPS - first + 1 or a != b:
        fail(f"{what}: (step, loss, grad norm, loss scale, overflow, skipped) {b} differ from "
             f"the in-memory run's {a}")


def check_tiers(d, what):
    """Every tier held chunks after each update (a skipped step runs no host-tier update, which
    may leave the host tier empty) and NVMe was read and written."""
    recs = [r["offload"] for r in step_records(d)]
    updated = [r["offload"] for r in step_records(d) if not r.get("skipped")]
    if len(recs) != STEPS or not updated or not all(
            r["device_bytes"] > 0 and r["host_bytes"] > 0 and r["nvme_bytes"] > 0
            for r in updated):
        fail(f"{what}: some step did not hold chunks in every tier: {recs}")
    if not any(r["nvme_read_bytes"] > 0 for r in recs) or not any(
            r["nvme_write_bytes"] > 0 for r in recs):
        fail(f"{what}: no NVMe traffic: {recs}")


def smallest(cmd, env, budget):
    """The smallest budget the refusal of CMD names (CMD must be refused)."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    m = re.search(rf"smallest {budget} budget that works is (\d+) bytes", p.stdout + p.stderr)
    if p.returncode == 0 or not m:
        fail(f"expected a {budget} budget refusal: rc {p.returncode}, {p.stderr[-800:]}")
    return int(m.group(1))


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    cfg = gpt2_config(vocab, n_positions=17, n_embd=33, n_layer=3, n_head=3)
    config = write_json(os.path.join(work, "config.json"), cfg)
    common = ["train"] + train_sets(
        config, os.path.join(work, "data"), STEPS, seq_len=13,
        extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}", "train.micro_batch=3",
               "train.global_batch=12", "optim.grad_clip=0.05", "optim.weight_decay=0.1",
               f"train.loss_scale_init={FP16_SCALE}"])
    env = single_thread_env()
    one = [tessel] + common
    mpi = mpi_prefix(mpirun) + ["-np", "2", tessel] + common + ["--dp", "2"]

    # The smallest device tier of the 16-bit layout, and the host tier's row of five chunks.
    nvme = os.path.join(work, "nvme_probe")
    os.makedirs(nvme)
    probe = one + ["--set", "train.precision=bf16", "--set",
                   "checkpoint.dir=" + os.path.join(work, "probe")]
    device = smallest(probe + offload_sets(nvme, 8, 1, CHUNK), env, "device") // CHUNK
    host = smallest(probe + offload_sets(nvme, 4, device, CHUNK), env, "host")
    if host != 5 * CHUNK:
        fail(f"bf16 offload names a smallest host budget of {host} bytes, expected 5 chunks")
    print(f"bf16 offload: device tier of {device} chunks; a host tier of 4 chunks is refused "
          f"naming {host} bytes (5 chunks)")

    for precision, recompute in (("bf16", "none"), ("fp16", "none"), ("bf16", "full")):
        prec = ["--set", f"train.precision={precision}", "--set", f"train.recompute={recompute}"]
        tag = precision + ("" if recompute == "none" else "_recompute_" + recompute)
        ref = os.path.join(work, f"memory_{tag}")
        run(one + prec + ["--set", "checkpoint.dir=" + ref], env=env)
        if precision == "fp16" and not any(r[4] for r in precision_records(ref)):
            fail(f"fp16 from loss scale {FP16_SCALE}: no step overflowed, {precision_records(ref)}")
        off = os.path.join(work, f"offload_{tag}")
        nvme = os.path.join(work, f"nvme_{tag}")
        os.makedirs(nvme)
        run(one + prec + ["--set", "checkpoint.dir=" + off] +
            offload_sets(nvme, 5, device, CHUNK), env=env)
        # The replay of a block's forward inside its backward reads the same kept copies.
        what = f"{precision} offloaded" + ("" if recompute == "none" else
                                            f" (recompute {recompute})")
        same_records(ref, off, what)
        check_tiers(off, what)
        for step in (SAVE, STEPS):
            files = same_checkpoint(ref, off, step, what)
        print(f"{what}: {STEPS} steps' losses, norms and scales bitwise the in-memory run's; "
              f"checkpoints at steps {SAVE} and {STEPS} byte for byte ({', '.join(files)})")
        if precision != "bf16" or recompute != "none":
            continue
        # The in-memory checkpoint resumes offloaded: the copies come from the loaded masters.
        r = os.path.join(work, "resume_memory_bf16_offloaded")
        seed_resume(ref, f"step_{SAVE:06d}", r)
        nvme = os.path.join(work, "nvme_resume")
        os.makedirs(nvme)
        run([tessel, "train", "--resume", r] + offload_sets(nvme, 5, device, CHUNK), env=env)
        same_records(ref, r, "the in-memory bf16 checkpoint resumed offloaded", first=SAVE + 1)
        same_checkpoint(ref, r, STEPS, "the in-memory bf16 checkpoint resumed offloaded")
        print("bf16: the in-memory checkpoint resumed offloaded stays on its trajectory bitwise")

    for stage in (2, 3):
        for precision in ("bf16", "fp16"):
            tag = f"zero{stage}_{precision}"
            zero = ["--set", f"parallel.zero_stage={stage}", "--set",
                    f"train.precision={precision}"]
            ref = os.path.join(work, f"memory_{tag}")
            run(mpi + zero + ["--set", "checkpoint.dir=" + ref], env=env)
            off = os.path.join(work, f"offload_{tag}")
            nvme = os.path.join(work, f"nvme_{tag}")
            os.makedirs(nvme)
            host_chunks, device_chunks = DP_TIERS[stage]
            run(mpi + zero + ["--set", "checkpoint.dir=" + off] +
                offload_sets(nvme, host_chunks, device_chunks, DP_CHUNK[stage]), env=env)
            what = f"dp 2 ZeRO-{stage} {precision} offloaded"
            same_records(ref, off, what)
            for step in (SAVE, STEPS):
                files = same_checkpoint(ref, off, step, what)
            print(f"{what}: losses, norms and scales bitwise the in-memory run's; checkpoints "
                  f"byte for byte ({', '.join(files)})")


if __name__ == "__main__":
    main()
