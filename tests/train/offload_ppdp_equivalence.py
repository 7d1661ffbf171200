#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory offload composed with pipeline stages and data parallelism (docs/MEMORY.md, "With
pipeline stages"): `mpirun -np 4 tessel train --pp 2 --dp 2` with each rank's ZeRO shards of its
own stage's state in chunks of its own equals the same run in memory bit for bit: every step's
loss and gradient norm, the validation losses and the checkpoints' bytes, under ZeRO-1 (the
all-reduced gradient bucket in a chunk: the first stage adds the last stage's gradient of the tied
embedding into it under the bucket's hold), ZeRO-2 (the same into its full buffer's chunk) and
ZeRO-3 (every tier in use). A GPT-2 with tied embeddings,
C = 26, 2 heads, 5 blocks, sequences of 13, two micro-batches of 3 per rank under 1F1B, clipping.
The same in bf16 at every stage (ZeRO-1/2: the replicas' 16-bit copies in chunks of their own;
ZeRO-3: the copies made from each gather). The offloaded ZeRO-1 checkpoint resumes in memory on
the uninterrupted trajectory, and the in-memory one offloaded.
A pipeline step keeps one set of 16-bit copies over its micro-batches, so at ZeRO-1/2 every unit's
copies may be held in the device tier at once: with a model whose copies take five chunks on a
stage (13 blocks 192 wide, 1 MiB buckets and chunks) the budget the per-unit rule would allow
(6 chunks; the run used to fail mid-step asking for 7) is refused before any step, naming the
budget that holds them all, and that budget trains bit for bit as in memory.

Usage: offload_ppdp_equivalence.py TESSEL MPIRUN WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import (check_tiers, offload_sets, resumes_both_ways,  # noqa: E402
                          same_checkpoint, same_records, same_val_losses, small_gpt2)
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

# ZeRO-1: a stage's one bucket (under 128 KiB) is a chunk, its moments' shards two more.
# ZeRO-3: 32 KiB chunks hold the largest unit's shard.
# ZeRO-2: the bucket's full buffer is a chunk, its gradient and moments' shards one each.
CHUNK = {1: 128 << 10, 2: 128 << 10, 3: 32 << 10}
BUDGETS = {1: (3, 1), 2: (3, 1), 3: (4, 3)}  # (host, device) chunks
STEPS, SAVE = 8, 4
RANKS = ["rank0", "rank1", "rank2", "rank3"]



def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    gpt2 = small_gpt2(work, vocab)
    common = ["train"] + train_sets(
        gpt2, os.path.join(work, "data"), STEPS, seq_len=13,
        extra=["machine.peak_gflops=100", f"checkpoint.interval={SAVE}",
               f"eval.interval={SAVE}", "eval.batches=2", "train.micro_batch=3",
               "train.global_batch=12", "optim.grad_clip=0.05", "optim.weight_decay=0.1"])
    env = single_thread_env()
    mpi = mpi_prefix(mpirun) + ["-np", "4", tessel]
    ppdp = ["--pp", "2", "--dp", "2"]

    def nvme(tag):
        d = os.path.join(work, "nvme_" + tag)
        os.makedirs(d)
        return d

    def offloaded(stage, tag):
        return offload_sets(nvme(tag), *BUDGETS[stage], CHUNK[stage])

    def compare(stage, precision="fp32"):
        tag = f"zero{stage}_{precision}"
        m, o = (os.path.join(work, f"{k}_{tag}") for k in ("memory", "offload"))
        zero = ["--set", f"parallel.zero_stage={stage}", "--set", f"train.precision={precision}"]
        run(mpi + common + ppdp + zero + ["--set", "checkpoint.dir=" + m], env=env)
        host, device = BUDGETS[stage]
        if precision != "fp32" and stage < 3:
            device = 2  # ZeRO-1/2 in bf16: the copies' chunk beside the bucket's
        run(mpi + common + ppdp + zero + ["--set", "checkpoint.dir=" + o] +
            offload_sets(nvme(tag), host, device, CHUNK[stage]), env=env)
        what = f"pp 2 x dp 2 ZeRO-{stage} {precision} offloaded"
        same_records(m, o, what, STEPS)
        if stage == 3:
            check_tiers(o, what, STEPS)
        elif len(step_records(o)) != STEPS or not all(
                r["offload"]["host_bytes"] >= 2 * CHUNK[stage] and
                (stage == 2 or r["offload"]["d2h_bytes"] > 0) for r in step_records(o)):
            # The moments stay in the host tier; ZeRO-1's bucket comes down from the device tier
            # for the update every step (ZeRO-2's full buffer is discarded once reduced).
            fail(f"{what}: the moments' two chunks are not in the host tier, or the bucket "
                 f"did not move: {[r['offload'] for r in step_records(o)]}")
        same_val_losses(m, o, what, STEPS // SAVE)
        swap = os.path.join(work, "nvme_" + tag)
        if sorted(os.listdir(swap)) != RANKS or any(os.listdir(os.path.join(swap, r))
                                                   for r in RANKS):
            fail(f"{what}: {swap} holds {sorted(os.listdir(swap))}: expected one empty folder "
                 f"per rank (the swap files are unlinked)")
        for step in (SAVE, STEPS):
            files = same_checkpoint(m, o, step, what)
        print(f"{what}: {STEPS} steps' losses and norms and the validation losses bitwise the "
              f"in-memory run's; checkpoints at steps {SAVE} and {STEPS} byte for byte "
              f"({', '.join(files)})")
        return m, o

    ref, off = compare(1)
    compare(2)
    compare(3)
    for stage in (1, 2, 3):
        compare(stage, "bf16")

    # The offloaded ZeRO-1 checkpoint resumes in memory, and the in-memory one offloaded, both on
    # the uninterrupted trajectory.
    zero1 = ["--set", "parallel.zero_stage=1"]
    resumes_both_ways(mpi, ppdp + zero1, ref, off, work, STEPS, SAVE, offloaded(1, "resume"),
                      "pp 2 x dp 2 ZeRO-1", env)

    # Copies that span the step: every unit's in the device tier at once, counted at start.
    wide = write_json(os.path.join(work, "wide.json"),
                      gpt2_config(vocab, n_positions=17, n_embd=192, n_layer=13, n_head=2))
    mib = 1 << 20
    wide_run = ["train"] + train_sets(
        wide, os.path.join(work, "data"), 4, seq_len=13,
        extra=["machine.peak_gflops=100", "train.micro_batch=3", "train.global_batch=12",
               "parallel.zero_stage=2", "parallel.bucket_mb=1", "train.precision=bf16"])
    # Each rank names its own need (the stages differ) and the first refusal ends the launch, so
    # a budget one rank accepts may still be refused by the other: rerun with the larger need.
    span_need = re.compile(r"one step holds up to (\d+) chunks in the device tier at once \(16-bit "
                           r"copies: every unit's, kept over the step's micro-batches")
    m, o = (os.path.join(work, f"{k}_span") for k in ("memory", "offload"))
    run(mpi + wide_run + ppdp + ["--set", "checkpoint.dir=" + m], env=env)
    device, refused = 6, []
    for attempt in range(3):
        shutil.rmtree(o, ignore_errors=True)
        p = subprocess.run(mpi + wide_run + ppdp + ["--set", "checkpoint.dir=" + o] +
                           offload_sets(nvme(f"span{attempt}"), 3, device, mib),
                           capture_output=True, text=True, env=env)
        if p.returncode == 0:
            break
        needs = [int(n) for n in span_need.findall(p.stdout + p.stderr)]
        if not needs or max(needs) <= device or "step 1/" in p.stdout:
            fail(f"copies spanning the step: a device tier of {device} chunks should be refused "
                 f"at start naming a larger one, got exit {p.returncode}\n"
                 f"{(p.stdout + p.stderr)[-2000:]}")
        refused.append(device)
        device = max(needs)
    if not refused or refused[0] != 6 or p.returncode != 0:
        fail(f"copies spanning the step: refused budgets {refused}, last exit {p.returncode}\n"
             f"{(p.stdout + p.stderr)[-2000:]}")
    same_records(m, o, "pp 2 x dp 2 ZeRO-2 bf16, copies spanning the step", 4)
    print(f"copies spanning the step: device tiers of {refused} chunks refused at start; at "
          f"{device} chunks 4 steps bitwise the in-memory run's")

if __name__ == "__main__":
    main()
