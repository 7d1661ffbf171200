#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Offloaded start-up streams, and a step stays within its budgets, under data parallelism
(docs/MEMORY.md, "With data parallelism"), measured by the operating system: `mpirun -np 2 tessel train --dp 2` of a GPT-2 of 101M
parameters, each rank's ZeRO shards in chunks under a host tier several times smaller than them.
ZeRO made the shards shape-only and each parameter shard is computed straight into its chunk as
the chunks are sealed (the moments start there as zeros), so every rank's peak resident set
(VmHWM) after start-up stays within what it holds in plain memory by design (ZeRO-2's replicated
parameters; nothing at ZeRO-3), its tiers' budgets, the two staging chunks sealing writes through
and a fixed allowance for the process itself -- below the state the shards would be in memory.
After the step, the peak is bounded by what is held by design, the budgets, the allowance and the
step's own working memory from the model's geometry: ZeRO-3's gathered units (its
gathered_peak_bytes) and three of the largest bucket (the two full gradient buffers a reduction
may keep alive, and backward's gradients on their way into them or ZeRO-2's all_gather staging).
The gradient shards (4 bytes per parameter over dp, 193 MiB here) live in chunks too, so a rank
holding them in plain memory exceeds that bound (it did: 668 and 817 MiB against 625 and 685).
ZeRO-2 in bf16 runs too: its 16-bit copies of the replicated parameters (2 bytes per parameter,
193 MiB) are chunks held unit by unit, within the same bound plus the larger device tier; a rank
making the whole model's copies per micro-batch in plain memory exceeds it (1060 MiB against 733).
ZeRO-2 and ZeRO-3 with two micro-batches per step and buckets that fit a chunk: their full gradient
buffers (the whole model's gradients between the micro-batches, 386 MiB) are chunks too; a rank
holding them in plain memory exceeds the step's bound (1004 MiB against 690 at ZeRO-2, 1093 against
891 at ZeRO-3).
ZeRO-1 in bf16 with 16 MiB buckets: its all-reduced gradient buckets (4 bytes per parameter, 386
MiB, the whole model's) are chunks too, written by backward in the device tier; a rank holding
them in plain memory exceeds both bounds (1011 MiB after start-up against 738, 1067 after the
step against 754).
(That the offloaded runs equal the in-memory ones bit for bit is offload_dp_equivalence.py's.)

Usage: offload_dp_startup.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir,  # noqa: E402
                         remove_workdir, run, single_thread_env, step_records, train_sets, write_json)

MIB = 1 << 20
ALLOWANCE = 160 * MIB  # the process without the state (code, MPI, threads, dataset, heap)
# ZeRO-3: a chunk holds a rank's shard of a block (12.6M parameters / 2 in f32, 25 MB); the
# device tier 3 chunks (a unit's gather and those started ahead), the host tier a bucket's row
# (parameter, gradient and both moments' shards). ZeRO-2: 25 MiB buckets, a rank's gradient or
# moment shard of one is 12.5 MiB; the host row is 3 chunks.
# ZeRO-2 in bf16: the 16-bit copies of the replicated parameters (2 bytes per parameter, 193 MiB)
# are chunks too, a unit's held in the device tier around its forward and backward: the device
# tier holds the working set of a block's copies with the embeddings'.
C, LAYERS = 1024, 8
BLOCK = 4 * (12 * C * C + 13 * C)  # one block's f32 parameters: ZeRO-3's largest bucket
# (stage, precision, micro-batches per rank): chunk, device chunks, host chunks, the largest
# gradient bucket (parallel.bucket_mb below stage 3; ZeRO-3's buckets are its units).
SETUP = {(3, "fp32", 1): (32 * MIB, 3, 4, BLOCK), (2, "fp32", 1): (16 * MIB, 1, 3, 25 * MIB),
         (2, "bf16", 1): (16 * MIB, 4, 3, 25 * MIB),
         (1, "bf16", 1): (16 * MIB, 7, 3, 16 * MIB),
         (2, "fp32", 2): (16 * MIB, 3, 3, 16 * MIB),
         (3, "fp32", 2): (49 * MIB, 6, 4, BLOCK)}
# ZeRO-1 in bf16: the copies' 4 chunks and 3 of gradient buckets (parallel.bucket_mb 16, so a
# bucket fits a chunk) in the device tier; the host row a bucket and both moments' shards.
# ZeRO-2/3 with two micro-batches per step: each bucket's full gradient buffer fits a chunk (16
# MiB buckets; a 49 MiB chunk holds a block), so the buffers are chunks, three of them in the
# device tier (with ZeRO-3's three parameter-shard chunks). Every buffer holds its sum from the
# first micro-batch to the second's reduce_scatter -- the whole model's gradients (4 bytes per
# parameter, 386 MiB) -- which a rank keeping them in plain memory adds to its step's peak: 1004-1005
# and 1093 MiB against bounds of 690 and 891 MiB (the old code, the same runs; 618-619 and 689-690
# with the buffers in chunks).


def build_record(run_dir):
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        for j in map(json.loads, f):
            if j.get("checkpoint_event") == "build":
                return j
    fail(f"no build record in {run_dir}/train.jsonl")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    cfg = gpt2_config(vocab, n_positions=32, n_embd=C, n_layer=LAYERS, n_head=8)
    config = write_json(os.path.join(work, "config.json"), cfg)
    common = ["train"] + train_sets(config, os.path.join(work, "data"), 1, seq_len=16,
                                    extra=["train.micro_batch=1", "optim.warmup_steps=1",
                                           "machine.peak_gflops=100", "eval.batches=1"])
    mpi = mpi_prefix(mpirun) + ["-np", "2", tessel]
    for stage, precision, micro in SETUP:
        chunk, device_chunks, host_chunks, bucket = SETUP[(stage, precision, micro)]
        tag = (f"zero{stage}" + ("" if precision == "fp32" else "_" + precision) +
               ("" if micro == 1 else f"_accum{micro}"))
        what = (f"ZeRO-{stage}" + ("" if precision == "fp32" else " " + precision) +
                ("" if micro == 1 else f", {micro} micro-batches"))
        nvme = os.path.join(work, f"nvme_{tag}")
        os.makedirs(nvme)
        d = os.path.join(work, tag)
        sets = [f"parallel.zero_stage={stage}", f"train.precision={precision}",
                f"checkpoint.dir={d}", f"memory.chunk_size={chunk}",
                f"memory.device_budget={device_chunks * chunk}",
                f"memory.host_budget={host_chunks * chunk}", f"memory.nvme_dir={nvme}",
                f"parallel.bucket_mb={bucket // MIB if stage < 3 else 25}"]
        sets += [f"train.global_batch={2 * micro}"] if micro > 1 else []
        run(mpi + common + ["--dp", "2"] + [a for s in sets for a in ("--set", s)],
            env=single_thread_env())
        steps = step_records(d)
        if len(steps) != 1 or len(steps[0]["ranks"]) != 2:
            fail(f"{what}: expected one step record with two ranks, got {steps}")
        ranks = build_record(d)["ranks"]
        if len(ranks) != 2:
            fail(f"{what}: the build record has {len(ranks)} ranks, expected 2")
        for r, m in enumerate(ranks):
            held = m["param_bytes"]  # the parameters this rank holds: shards at 3, replicas at 2
            # The state the offloaded shards would be in memory: the parameter, gradient and both
            # moments' shards at stage 3 (the moments are twice the shard); the gradient and
            # moments' shards at stage 2 (12 bytes per parameter over 2 ranks: 1.5 x the replicas).
            # At stage 1 the whole all-reduced gradients (the replicas' size) and the moments'
            # shards (as much again).
            shards = 4 * held if stage == 3 else 3 * held // 2 if stage == 2 else 2 * held
            in_memory = 0 if stage == 3 else held  # stays in plain memory by design
            budgets = (device_chunks + host_chunks) * chunk
            bound = in_memory + budgets + 2 * chunk + ALLOWANCE
            peak = m["peak_rss_after_bytes"]
            print(f"{what} rank {r}: shards {shards / MIB:.0f} MiB (host tier "
                  f"{host_chunks * chunk / MIB:.0f} MiB), held in memory {in_memory / MIB:.0f} "
                  f"MiB; peak resident set after start-up {peak / MIB:.0f} MiB, bound "
                  f"{bound / MIB:.0f} MiB, state in memory {(in_memory + shards) / MIB:.0f} MiB")
            if shards <= 3 * host_chunks * chunk:
                fail(f"{what}: the shards ({shards} bytes) are not > 3x the host tier")
            if bound >= in_memory + shards:
                fail(f"{what}: the model is too small for the bound to show a copy")
            if peak > bound:
                fail(f"{what} rank {r}: peak resident set after start-up {peak} bytes > "
                     f"{bound} (held {in_memory}, budgets {budgets}, two chunks, allowance)")
            # The step: its working memory on top, and no gradient shard in plain memory (the
            # two staging chunks of start-up are gone; its own peak is checked above).
            gathered = steps[0]["gathered_peak_bytes"]  # ZeRO-3's units (alike on both ranks)
            working = gathered + 3 * bucket
            step_bound = max(bound, in_memory + budgets + ALLOWANCE + working)
            step_peak = steps[0]["ranks"][r]["rss_peak_bytes"]
            # The gradient shard, 4 bytes per parameter over dp (stage 1: the whole buckets).
            grads = held if stage == 3 else held // 2 if stage == 2 else held
            print(f"{what} rank {r}: peak resident set after the step {step_peak / MIB:.0f} "
                  f"MiB, bound {step_bound / MIB:.0f} MiB (working memory {working / MIB:.0f} "
                  f"MiB: gathered units {gathered / MIB:.0f}, three buckets); the gradient shard "
                  f"is {grads / MIB:.0f} MiB")
            if step_peak > step_bound:
                fail(f"{what} rank {r}: peak resident set after the step {step_peak} bytes "
                     f"> {step_bound} (held {in_memory}, budgets {budgets}, allowance, gathered "
                     f"units {gathered}, three buckets of {bucket}): state outside the "
                     f"tiers (the gradient shards, or the buckets' full buffers?)")
        if any(os.listdir(os.path.join(nvme, r)) for r in os.listdir(nvme)):
            fail(f"{what}: {nvme} is not empty after the run")
    print("offloaded dp 2 start-up and step (ZeRO-3, ZeRO-2, ZeRO-2 bf16, ZeRO-1 bf16; ZeRO-2 and "
          "ZeRO-3 with two micro-batches) within the budgets")
    remove_workdir(work)


if __name__ == "__main__":
    main()
