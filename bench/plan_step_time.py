#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The planner's step time against measured steps (docs/PLANNER.md, "Step time"): calibrates this
machine with `tessel plan calibrate --quick` over two ranks, then for each layout runs `tessel
train` for a few steps on a small GPT-2 and prints the median measured step_ms of steps 3..N next
to `tessel plan memory --cluster`'s prediction and its terms. The calibration and the runs follow
each other in one window, so the load other work puts on the machine reaches both (calibration
records it as `cpu_share`); the load average is printed before the calibration and after each
run. Each row: the prediction against the median wall step_ms and its error, then the load-free
terms (the prediction less load_ms) against the median step_cpu_ms (rank 0's CPU time per step)
and that error, which a loaded machine disturbs less. Prints a table; asserts nothing (timings on
a shared machine are not a test).

Usage: plan_step_time.py TESSEL MPIRUN WORKDIR [STEPS]
"""
import json
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "common"))
from tessel_runs import (gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

SEQ, BATCH = 64, 8
# (label, dp, tp, pp, schedule, micro-batches, micro-batch rows)
LAYOUTS = [
    ("one rank", 1, 1, 1, "", 1, BATCH),
    ("tp 2", 1, 2, 1, "", 1, BATCH),
    ("pp 2, GPipe, m=4", 1, 1, 2, "gpipe", 4, BATCH // 4),
    ("pp 2, 1F1B, m=4", 1, 1, 2, "1f1b", 4, BATCH // 4),
    ("dp 2", 2, 1, 1, "", 1, BATCH // 2),
]


def main():
    tessel, mpirun, work = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    env = single_thread_env()
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), gpt2_config(vocab, SEQ, 128, 4, 4))
    cluster = os.path.join(work, "machine.toml")
    print("load average before calibrating: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    run(mpi_prefix(mpirun) + ["-np", "2", tessel, "plan", "calibrate", "--quick", "-o", cluster],
        env=env)
    print(f"{'layout':<20} {'pred ms':>8} {'meas ms':>8} {'error':>7} {'free ms':>8} "
          f"{'cpu ms':>8} {'error':>7}  terms (ms)")
    for label, dp, tp, pp, schedule, micro, rows in LAYOUTS:
        out = os.path.join(work, "run")
        shutil.rmtree(out, ignore_errors=True)
        axes = ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp)]
        plan_axes = list(axes)
        if pp > 1:
            axes += ["--schedule", schedule, "--microbatches", str(micro)]
            plan_axes += ["--schedule", schedule, "--grad-accum", str(micro)]
        sets = train_sets(config, os.path.join(work, "data"), steps, SEQ, [
            f"train.micro_batch={rows}", f"checkpoint.dir={out}", "checkpoint.interval=0",
            "log.interval=1"])
        run(mpi_prefix(mpirun) + ["-np", str(dp * tp * pp), tessel, "train"] + axes + sets, env=env)
        records = step_records(out)[2:]
        measured = statistics.median(r["step_ms"] for r in records)
        # The step's CPU time (rank 0's process, MPI's polling included): on a loaded machine the
        # load-free terms are set against it too.
        cpu = statistics.median(r.get("step_cpu_ms", 0) for r in records)
        p = run([tessel, "plan", "memory", "--model", config] + plan_axes +
                ["--micro-batch", str(rows), "--seq", str(SEQ), "--cluster", cluster, "--json"],
                env=env)
        pred = json.loads(p.stdout)
        terms = " ".join(f"{k[:-3]} {pred[k]:.2f}" for k in (
            "compute_ms", "op_overhead_ms", "optimizer_ms", "dp_exposed_ms", "tp_comm_ms",
            "pp_comm_ms", "bubble_ms", "load_ms")
            if pred.get(k))
        err = (pred["step_ms"] - measured) / measured
        free = pred["step_ms"] - pred.get("load_ms", 0)
        cpu_err = (free - cpu) / cpu if cpu > 0 else 0
        print(f"{label:<20} {pred['step_ms']:>8.2f} {measured:>8.2f} {100 * err:>6.1f}% "
              f"{free:>8.2f} {cpu:>8.2f} {100 * cpu_err:>6.1f}%  {terms}"
              + (f" bubble {pred['bubble_fraction']:.3f}" if pp > 1 else "")
              + " (load %.2f)" % os.getloadavg()[0], flush=True)
    with open(cluster) as f:
        share = [line for line in f if line.startswith(("cpu_share", "op_overhead"))]
    print("calibrated: " + "; ".join(line.split("#")[0].strip() for line in share), flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
