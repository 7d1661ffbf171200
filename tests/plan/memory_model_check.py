#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The memory model against the allocator: for each layout, `tessel plan memory --json` predicts
one rank's peak (under pipelines each pipeline rank's) and `mpirun -np DP*TP*PP tessel train`
measures it, on a tiny GPT-2 for two steps (data, tensor and pipeline parallelism, ZeRO 0-3,
GPipe, 1F1B and interleaved): every rank's allocator peak of the last step (train.jsonl:
ranks[i].mem_bytes, in use between steps, plus ranks[i].step_peak_bytes) must be within 5% of the
prediction (ZeRO 0-3 alike), every pipeline rank and every bf16 layout exactly, and with dp > 1
the state between steps (ranks[i].state_bytes) within 1%. Prints each
layout's terms, measured and predicted, and the run's peak (mem_peak_bytes) (the table in
docs/PLANNER.md, "Memory model").

ZeRO-2 and ZeRO-3 are predicted by running the runtime's DataParallel and Zero3Parameters on the
meta device. Their peaks are asserted like the others: the runtime frees a reduce-scatter's full
gradient buffer at fixed points of the program (when the next bucket is launched, or at the
gradient sync), not when a reduction happens to be seen complete, and the communicator's progress
thread drops a finished call's tensors before reporting it done, so the peak no longer depends on
the other ranks' timing (docs/PLANNER.md, "Memory model", has the figures before and after).

Usage: memory_model_check.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

# (dp, zero stage, recompute, precision, micro-batch[, tp, pp, schedule, micro-batches])
LAYOUTS = [
    (1, 0, "none", "fp32", 3),
    (1, 0, "selective", "fp32", 3),
    (1, 0, "full", "fp32", 3),
    (1, 0, "none", "bf16", 3),
    (2, 0, "none", "fp32", 3),
    (2, 0, "full", "fp32", 3),
    (2, 1, "none", "fp32", 3),
    (2, 1, "selective", "bf16", 3),
    (2, 1, "full", "fp32", 3),
    (3, 1, "none", "fp32", 1),
    (2, 0, "selective", "bf16", 3),
    (1, 0, "selective", "bf16", 3),
    # Accumulation without a pipeline: the later micro-batches' activations come on top of the
    # gradients the first one's backward allocated (one rank, tp) or filled (dp buckets).
    (1, 0, "none", "fp32", 3, 1, 1, "", 2),
    (1, 0, "none", "fp32", 3, 2, 1, "", 2),
    (2, 1, "none", "fp32", 1, 1, 1, "", 3),
    # Tensor and pipeline parallelism: every rank checked against its own (pp) prediction.
    (1, 0, "none", "fp32", 3, 2, 1, "", 1),
    (1, 0, "selective", "fp32", 3, 2, 1, "", 1),
    (1, 0, "none", "fp32", 2, 1, 2, "gpipe", 4),
    (1, 0, "none", "fp32", 2, 1, 2, "1f1b", 4),
    (1, 0, "full", "fp32", 2, 1, 2, "1f1b", 4),
    (1, 0, "none", "bf16", 2, 1, 2, "1f1b", 4),
    (1, 0, "none", "fp32", 2, 1, 2, "interleaved", 4),
    (2, 1, "none", "fp32", 2, 2, 2, "1f1b", 4),
    # A recompute mode per pipeline rank (train.recompute = "full,none"): each rank its own.
    (1, 0, "full,none", "fp32", 2, 1, 2, "1f1b", 4),
    (1, 0, "none,selective", "bf16", 2, 1, 2, "gpipe", 4),
    # A mode on a rank's first blocks only (train.recompute = "full:2"), the others none.
    (1, 0, "full:2", "fp32", 3),
    (1, 0, "selective:1", "bf16", 3),
    (2, 1, "full:1", "fp32", 3),
    (1, 0, "full:1,none", "fp32", 2, 1, 2, "1f1b", 4),
    (1, 0, "selective:1", "fp32", 2, 1, 2, "interleaved", 4),
    # A stronger mode on the first blocks, a weaker one on the others ("full:1+selective").
    (1, 0, "full:1+selective", "fp32", 3),
    (1, 0, "full:1+selective,selective", "bf16", 2, 1, 2, "1f1b", 4),
    # ZeRO-2 and ZeRO-3 by the runtime's own code on meta, with accumulation, tp and pp. Before
    # the runtime freed gradient buffers at fixed points their peak moved by up to a whole buffer
    # from run to run (ZeRO-2, one bucket, full recompute: -15.9% and +15.9% of the same
    # prediction in two runs; ZeRO-3 with accumulation 0 to +5.4%) and was not asserted.
    (2, 2, "none", "fp32", 3),
    (2, 2, "full", "fp32", 3),
    (2, 2, "selective", "bf16", 3),
    (2, 2, "none", "fp32", 3, 2, 1, "", 1),
    (2, 2, "none", "fp32", 2, 1, 2, "1f1b", 4),
    (2, 3, "none", "fp32", 1, 1, 1, "", 3),
    (2, 3, "none", "fp32", 2, 1, 2, "gpipe", 4),
    # ZeRO-3 layouts whose peak moved by a block's gradient buffer (up to +13.6%) before.
    (2, 3, "none", "fp32", 3),
    (2, 3, "full", "fp32", 3),
    (2, 3, "selective", "bf16", 3),
    (2, 3, "none", "fp32", 3, 2, 1, "", 1),
    (2, 3, "none", "fp32", 2, 1, 2, "1f1b", 4),
    (2, 3, "none", "fp32", 2, 1, 2, "interleaved", 4),
]
SEQ = 31
PEAK_TOL = 0.05
STATE_TOL = 0.01


def main():
    tessel, mpirun, work = sys.argv[1:4]
    env = single_thread_env()
    try:
        vocab = prepare_workdir(tessel, work)
        config = write_json(os.path.join(work, "config.json"), gpt2_config(vocab, 32, 36, 3, 4))
        data = os.path.join(work, "data")
        print(f"{'layout':<44} {'state':>9} {'pred':>9} {'step':>9} {'pred':>9} "
              f"{'peak':>9} {'pred':>9} {'error':>7} {'run peak':>9}")
        worst = 0.0
        for layout in LAYOUTS:
            dp, zero, recompute, precision, mb = layout[:5]
            tp, pp, schedule, micro = layout[5:] if len(layout) > 5 else (1, 1, "", 1)
            what = f"dp={dp} zero={zero} recompute={recompute} {precision} b={mb}"
            axes, plan_axes = ["--dp", str(dp)], ["--dp", str(dp)]
            if tp > 1:
                what += f" tp={tp}"
                axes += ["--tp", str(tp)]
                plan_axes += ["--tp", str(tp)]
            extra = []
            if pp == 1 and micro > 1:
                what += f" accum={micro}"
                extra = [f"train.grad_accum={micro}"]
                plan_axes += ["--grad-accum", str(micro)]
            if pp > 1:
                what += f" pp={pp} {schedule} m={micro}"
                axes += ["--pp", str(pp), "--schedule", schedule, "--microbatches", str(micro)]
                plan_axes += ["--pp", str(pp), "--schedule", schedule, "--grad-accum", str(micro)]
            out = os.path.join(work, "run")
            shutil.rmtree(out, ignore_errors=True)
            sets = train_sets(config, data, 2, SEQ, [
                "optim.warmup_steps=1", f"train.micro_batch={mb}", f"train.recompute={recompute}",
                f"train.precision={precision}", f"parallel.zero_stage={zero}",
                f"checkpoint.dir={out}", "checkpoint.interval=0", "machine.peak_gflops=1",
                "log.interval=1"] + extra)
            n = dp * tp * pp
            run(mpi_prefix(mpirun) + ["-np", str(n), tessel, "train"] + axes + sets, env=env)
            last = step_records(out)[-1]
            p = run([tessel, "plan", "memory", "--model", config] + plan_axes + ["--zero",
                     str(zero), "--recompute", recompute, "--precision", precision,
                     "--micro-batch", str(mb), "--seq", str(SEQ), "--json"], env=env)
            top = json.loads(p.stdout)
            for r, rank in enumerate(last["ranks"]):
                # Mesh order tp-dp-pp (tp fastest): world rank r is pipeline rank r // (tp dp).
                pred = top["pp_ranks"][r // (tp * dp)] if pp > 1 else top
                # The allocator's peak of the step: what was in use when it began (mem_bytes at
                # the end of a step: parameters, moments, buffers) plus the step's own peak.
                measured = rank["mem_bytes"] + rank["step_peak_bytes"]
                err = (measured - pred["mem_peak_bytes"]) / pred["mem_peak_bytes"]
                state_err = abs(rank["state_bytes"] - pred["state_bytes"]) / pred["state_bytes"]
                worst = max(worst, abs(err))
                if r == 0 or (pp > 1 and r % (tp * dp) == 0):
                    print(f"{what:<44} {rank['state_bytes']:>9} {pred['state_bytes']:>9} "
                          f"{rank['step_peak_bytes']:>9} {pred['step_peak_bytes']:>9} "
                          f"{measured:>9} {pred['mem_peak_bytes']:>9} {100 * err:>6.2f}% "
                          f"{rank['mem_peak_bytes']:>9}")
                # One rank: the runtime's state_bytes counts the gradients its step makes.
                if dp > 1 and state_err > STATE_TOL:
                    fail(f"{what}: rank {r} state {rank['state_bytes']} bytes, predicted "
                         f"{pred['state_bytes']} ({100 * state_err:.2f}% > {100 * STATE_TOL}%)")
                # Pipelines are exact on every rank: the executor retires each send at a fixed
                # point (after the compute that follows it), which the trace replays. Before, the
                # last rank's peak moved by one sent input gradient from run to run (8,928 bytes
                # here, -1.39%), as the receiver's progress decided; and in bf16 the trace missed
                # the f32 stand-in of a unary backward's saved output (35,712 bytes, -2.90%), as
                # it did in every bf16 layout (one rank -1,932 bytes, ZeRO-2 +3.33%, ZeRO-3
                # +4.52%): those are exact now too.
                if (pp > 1 or precision != "fp32") and measured != pred["mem_peak_bytes"]:
                    fail(f"{what}: rank {r // (tp * dp)} of pp (world rank {r}) peak {measured} "
                         f"bytes, predicted {pred['mem_peak_bytes']} exactly "
                         f"({int(measured - pred['mem_peak_bytes']):+d} bytes, {100 * err:.2f}%); "
                         f"terms: {pred}")
                if abs(err) > PEAK_TOL:
                    fail(f"{what}: rank {r} peak {measured} bytes, predicted "
                         f"{pred['mem_peak_bytes']} ({100 * err:.2f}%, tolerance "
                         f"{100 * PEAK_TOL}%); terms: {pred}")
        print(f"memory_model_check: {len(LAYOUTS)} layouts, worst asserted peak error "
              f"{100 * worst:.2f}%")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
