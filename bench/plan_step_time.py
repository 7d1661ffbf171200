#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The planner's step time against measured steps (docs/PLANNER.md, "Step time"): calibrates this
machine with `tessel plan calibrate --quick` over two ranks, then for each layout asks `tessel plan
search` (restricted to the layout's devices, ZeRO stage, recompute mode, precision and micro-batch
size) for its row, runs exactly that row's `train_args` — the flags the planner prints for it and
`--plan auto` / `plan --check` launch — as `mpirun -np N tessel train ARGS` for a few steps on a
small GPT-2, and prints the median measured step_ms of steps 3..N next to the row's predicted
step time and its terms. The calibration and the runs follow each other in one window, so the
load other work puts on the machine reaches both (calibration records it as `cpu_share`); the
load average is printed before the calibration and after each run. Each row: the prediction
against the median wall step_ms and its error, then the load-free terms (the prediction less
load_ms) against the median step_cpu_ms (rank 0's CPU time per step) and that error, which a
loaded machine disturbs less. Prints a table (and with --json a file); asserts nothing (timings
on a shared machine are not a test). `--without-cache` also asks the planner for each row with the
calibration's `cache_bytes` removed (every operand costed as evicted from the private caches,
the model before the reuse-distance term) and prints that prediction and its error beside.

Usage: plan_step_time.py TESSEL MPIRUN WORKDIR [STEPS] [--only KEY,...] [--json FILE]
                         [--cluster FILE] [--without-cache] [--list]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

SEQ, BATCH = 64, 8


def layout(key, label, dp=1, tp=1, pp=1, zero=0, recompute="none", micro=BATCH, accum=1,
           schedule="", precision="fp32"):
    return {"key": key, "label": label, "dp": dp, "tp": tp, "pp": pp, "zero_stage": zero,
            "recompute": recompute, "micro_batch": micro, "grad_accum": accum,
            "schedule": schedule, "precision": precision}


# Every layout takes the same 8 rows of 64 tokens a step. Sequence parallelism (`--sp`) is not in
# the list: the planner's layouts do not model it (plan search has no sp axis).
LAYOUTS = [
    layout("one", "one rank"),
    layout("one-sel", "one rank, selective", recompute="selective"),
    layout("one-full", "one rank, full", recompute="full"),
    layout("one-bf16", "one rank, bf16", precision="bf16"),
    layout("tp2", "tp 2", tp=2),
    layout("tp2-sel", "tp 2, selective", tp=2, recompute="selective"),
    layout("tp2-full", "tp 2, full", tp=2, recompute="full"),
    layout("pp2-gpipe", "pp 2, GPipe, m=4", pp=2, micro=2, accum=4, schedule="gpipe"),
    layout("pp2-1f1b", "pp 2, 1F1B, m=4", pp=2, micro=2, accum=4, schedule="1f1b"),
    layout("pp2-int2", "pp 2, interl. 2, m=4", pp=2, micro=2, accum=4, schedule="interleaved:2"),
    layout("dp2", "dp 2, ZeRO-0", dp=2, micro=4),
    layout("dp2-z1", "dp 2, ZeRO-1", dp=2, zero=1, micro=4),
    layout("dp2-z2", "dp 2, ZeRO-2", dp=2, zero=2, micro=4),
    layout("dp2-z3", "dp 2, ZeRO-3", dp=2, zero=3, micro=4),
]
MATCH = ("dp", "tp", "pp", "zero_stage", "recompute", "micro_batch", "grad_accum")
TERMS = ("compute_ms", "op_overhead_ms", "optimizer_ms", "dp_exposed_ms", "tp_comm_ms",
         "pp_comm_ms", "bubble_ms", "load_ms")


def planner_row(tessel, config, cluster, lay, env):
    """The `plan search` row of LAY: the search restricted to its devices, ZeRO stage, recompute
    mode, precision and micro-batch size, then the row with LAY's every axis."""
    devices = lay["dp"] * lay["tp"] * lay["pp"]
    p = run([tessel, "plan", "search", "--model", config, "--cluster", cluster, "--devices",
             str(devices), "--global-batch", str(BATCH), "--seq", str(SEQ), "--precision",
             lay["precision"], "--zero", str(lay["zero_stage"]), "--recompute", lay["recompute"],
             "--max-micro-batch", str(lay["micro_batch"]), "--top", "1000", "--json"], env=env)
    res = json.loads(p.stdout)
    for row in res["ranked"] + res["pruned"]:
        # The runtime's balanced stages: the DP's split is a row of its own (docs/PLANNER.md,
        # "Pipeline stages"), not the layout this table follows from run to run.
        if all(row.get(k) == lay[k] for k in MATCH) and not row.get("pipeline_split") and \
                (lay["pp"] == 1 or row.get("schedule") == lay["schedule"]):
            if row["status"] != "ranked":
                fail(f"{lay['label']}: the planner did not rank it: {row['status']}: "
                     f"{row.get('reason', '')}")
            return row
    fail(f"{lay['label']}: no such row in plan search's output")


def run_layout(a, tessel, mpirun, work, config, lay, pred, env, cold=None):
    """Runs LAY's planner row PRED for a.steps steps, prints its table row and returns it."""
    out = os.path.join(work, "run")
    shutil.rmtree(out, ignore_errors=True)
    devices = lay["dp"] * lay["tp"] * lay["pp"]
    # The planner's own flags for the row, then the run's data, length and precision as
    # `plan --check` adds them.
    command = mpi_prefix(mpirun) + ["-np", str(devices), tessel, "train"] + \
        pred["train_args"]
    sets = train_sets(config, os.path.join(work, "data"), a.steps, SEQ, [
        f"train.precision={lay['precision']}", f"checkpoint.dir={out}",
        "checkpoint.interval=0", "log.interval=1"])
    t0 = time.time()
    run(command + sets, env=env)
    run_s = time.time() - t0
    records = step_records(out)[2:]
    measured = statistics.median(r["step_ms"] for r in records)
    # The step's CPU time (rank 0's process, MPI's polling included): on a loaded machine the
    # load-free terms are set against it too.
    cpu = statistics.median(r.get("step_cpu_ms", 0) for r in records)
    # The trainer's own split of the step (slowest rank per term): compute, the exposed
    # communication of each axis, the pipeline's bubble, to set against the predicted terms.
    split = {k: statistics.median(r.get(k, 0) for r in records)
             for k in ("compute_ms", "dp_comm_ms", "tp_comm_ms", "pp_bubble_ms")}
    terms = {k[:-3]: pred[k] for k in TERMS if pred.get(k)}
    err = (pred["step_ms"] - measured) / measured
    free = pred["step_ms"] - pred.get("load_ms", 0)
    cpu_err = (free - cpu) / cpu if cpu > 0 else None
    load = os.getloadavg()
    print(f"{lay['label']:<22} {pred['step_ms']:>8.2f} {measured:>8.2f} {100 * err:>6.1f}% "
          f"{free:>8.2f} {cpu:>8.2f} "
          + (f"{100 * cpu_err:>6.1f}%" if cpu_err is not None else f"{'-':>7}")
          + "  " + " ".join(f"{k} {v:.2f}" for k, v in terms.items())
          + (f" bubble {pred['bubble_fraction']:.3f}" if lay["pp"] > 1 else "")
          + (f" | without cache {cold['step_ms']:.2f} "
             f"{100 * (cold['step_ms'] - measured) / measured:.1f}%" if cold else "")
          + " (load %.2f)" % load[0], flush=True)
    print(" " * 23 + "measured: " + " ".join(f"{k[:-3]} {v:.2f}" for k, v in split.items() if v),
          flush=True)
    return {"key": lay["key"], "label": lay["label"], "layout": pred["layout"],
            "precision": lay["precision"], "train_args": pred["train_args"],
            "command": "mpirun -np %d tessel train %s" % (
                devices, " ".join(pred["train_args"])),
            "predicted_step_ms": pred["step_ms"], "load_ms": pred.get("load_ms", 0),
            "load_free_ms": free, "terms_ms": terms,
            "bubble_fraction": pred.get("bubble_fraction", 0),
            "measured_step_ms": measured, "measured_step_cpu_ms": cpu, "measured_terms_ms": split,
            "error": err, "cpu_error": cpu_err, "run_seconds": run_s,
            "load_average_after": load[0],
            "without_cache": ({"predicted_step_ms": cold["step_ms"],
                               "terms_ms": {k[:-3]: cold[k] for k in TERMS if cold.get(k)},
                               "error": (cold["step_ms"] - measured) / measured}
                              if cold else None)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tessel", nargs="?")
    ap.add_argument("mpirun", nargs="?")
    ap.add_argument("work", nargs="?")
    ap.add_argument("steps", nargs="?", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated layout keys (--list)")
    ap.add_argument("--json", default="", help="also write the rows to this JSON file")
    ap.add_argument("--cluster", default="",
                    help="a calibrated description to use instead of calibrating first")
    ap.add_argument("--without-cache", action="store_true",
                    help="also predict each row without the calibration's cache_bytes")
    ap.add_argument("--list", action="store_true", help="print the layout keys and exit")
    a = ap.parse_args()
    if a.list:
        for lay in LAYOUTS:
            print(f"{lay['key']:<10} {lay['label']}")
        return
    if not a.work:
        ap.error("TESSEL, MPIRUN and WORKDIR are required")
    layouts = LAYOUTS
    if a.only:
        keys = a.only.split(",")
        unknown = [k for k in keys if k not in {lay["key"] for lay in LAYOUTS}]
        if unknown:
            fail(f"unknown layout keys {unknown}; --list names them")
        layouts = [lay for lay in LAYOUTS if lay["key"] in keys]
    tessel, mpirun, work = os.path.abspath(a.tessel), a.mpirun, a.work
    start = time.time()
    env = single_thread_env()
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), gpt2_config(vocab, SEQ, 128, 4, 4))
    load_before = os.getloadavg()
    print("load average before calibrating: %.2f %.2f %.2f" % load_before, flush=True)
    cluster = a.cluster or os.path.join(work, "machine.toml")
    if not a.cluster:
        run(mpi_prefix(mpirun) + ["-np", "2", tessel, "plan", "calibrate", "--quick", "-o",
                                  cluster], env=env)
    cold_cluster = None
    if a.without_cache:
        cold_cluster = os.path.join(work, "machine-without-cache.toml")
        with open(cluster) as f, open(cold_cluster, "w") as g:
            g.writelines(line for line in f if not line.startswith("cache_bytes"))
    print(f"{'layout':<22} {'pred ms':>8} {'meas ms':>8} {'error':>7} {'free ms':>8} "
          f"{'cpu ms':>8} {'error':>7}  terms (ms)")
    rows, failed = [], []
    for lay in layouts:
        try:
            pred = planner_row(tessel, config, cluster, lay, env)
            cold = planner_row(tessel, config, cold_cluster, lay, env) if cold_cluster else None
            row = run_layout(a, tessel, mpirun, work, config, lay, pred, env, cold)
        except SystemExit:
            # fail() has printed why; the other layouts still run.
            print(f"{lay['label']:<22} failed (above)", flush=True)
            failed.append(lay["key"])
            continue
        rows.append(row)
    with open(cluster) as f:
        calibrated = {line.split("=")[0].strip(): line.split("=")[1].split("#")[0].strip()
                      for line in f
                      if line.startswith(("cpu_share", "op_overhead", "cache_bytes"))}
    print("calibrated: " + "; ".join(f"{k} = {v}" for k, v in calibrated.items()), flush=True)
    seconds = time.time() - start
    print(f"{len(rows)} layouts in {seconds:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"seq": SEQ, "rows_per_step": BATCH, "steps": a.steps,
                       "load_average_before": load_before[0], "calibrated": calibrated,
                       "seconds": seconds, "rows": rows, "failed": failed}, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
