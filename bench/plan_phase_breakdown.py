#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where the planner's step time and a real step differ, phase by phase and kernel by kernel
(docs/PLANNER.md, "Step time", the per-phase table). On the small GPT-2 of bench/plan_step_time.py
(4 layers x 128, T = 64, 8 rows, one thread): calibrates this machine as one device (`tessel plan
calibrate --quick`, or reuses CLUSTER), profiles a few steps with `tessel bench train --breakdown`
(each kernel call and phase timed by this thread's CPU time, which other work on the machine does
not inflate), reads the planner's prediction per kernel from `tessel plan memory --cluster --json`,
and reads `tessel train`'s whole step in CPU time (train.jsonl's step_cpu_ms), so a loaded
machine can still be compared. Prints
the load average with the figures; asserts nothing (timings on a shared machine are not a test).
`--precision bf16` (or fp16) runs and predicts the mixed-precision step instead of fp32.

Usage: plan_phase_breakdown.py TESSEL WORKDIR [CLUSTER] [--precision fp32|bf16|fp16]
"""
import json
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "common"))
from tessel_runs import (gpt2_config, prepare_workdir, run, single_thread_env,  # noqa: E402
                         step_records, train_sets, write_json)

SEQ, BATCH, PROFILED = 64, 8, 6


def train_step_cpu_ms(tessel, config, work, env, precision, steps=8):
    """`tessel train`'s step: the median of steps 3..N of its step_cpu_ms (the process's CPU
    time over the step) and of its step_ms (wall)."""
    out = os.path.join(work, "run")
    shutil.rmtree(out, ignore_errors=True)
    sets = train_sets(config, os.path.join(work, "data"), steps, SEQ, [
        f"train.micro_batch={BATCH}", f"checkpoint.dir={out}", "checkpoint.interval=0",
        "log.interval=1", f"train.precision={precision}"])
    run([tessel, "train"] + sets, env=env)
    records = step_records(out)[2:]
    return (statistics.median(r["step_cpu_ms"] for r in records),
            statistics.median(r["step_ms"] for r in records))


def family(op):
    """A profiled kernel's name as the trace names it: 'gemm.NT 512x384x128' -> 'gemm',
    'unary.gelu' -> 'unary', 'binary.add [..] [..]' -> 'binary'."""
    return op.split(" ")[0].split(".")[0]


def main():
    args = sys.argv[1:]
    precision = "fp32"
    if "--precision" in args:
        i = args.index("--precision")
        precision = args[i + 1]
        del args[i:i + 2]
    tessel, work = args[0:2]
    env = single_thread_env()
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"), gpt2_config(vocab, SEQ, 128, 4, 4))
    cluster = args[2] if len(args) > 2 else os.path.join(work, "machine.toml")
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), f"precision {precision}",
          flush=True)
    if len(args) <= 2:
        run([tessel, "plan", "calibrate", "--quick", "-o", cluster], env=env)
    bench = run([tessel, "bench", "train", "--model", config, "-B", str(BATCH), "-T", str(SEQ),
                 "--threads", "1", "--peer", "none", "--steps", "4", "--warmup", "2",
                 "--precision", precision,
                 "--breakdown", "--breakdown-steps", str(PROFILED)], env=env)
    lines = [json.loads(x) for x in bench.stdout.splitlines() if x.startswith("{")]
    pred = json.loads(run([tessel, "plan", "memory", "--model", config, "--micro-batch",
                           str(BATCH), "--seq", str(SEQ), "--cluster", cluster, "--json",
                           "--precision", precision],
                          env=env).stdout)
    train_cpu, train_wall = train_step_cpu_ms(tessel, config, work, env, precision)

    measured, calls = {}, {}
    for j in lines:
        if j.get("figure") == "breakdown":
            k = family(j["op"])
            measured[k] = measured.get(k, 0) + j["cpu_ms_per_step"]
            calls[k] = calls.get(k, 0) + j["calls_per_step"]
    phases = {j["phase"]: j["cpu_ms_per_step"] for j in lines
              if j.get("figure") == "breakdown_phase"}
    total = next(j for j in lines if j.get("figure") == "breakdown_total")
    step = next(j for j in lines if j.get("figure") == "step")
    kernels = pred.get("kernels_ms", {})
    print(f"{'kernel':<26} {'calls':>6} {'pred ms':>8} {'CPU ms':>8} {'pred-meas':>9}")
    for k in sorted(set(measured) | set(kernels), key=lambda k: -measured.get(k, 0)):
        p, m = kernels.get(k, 0.0), measured.get(k, 0.0)
        print(f"{k:<26} {calls.get(k, 0):>6.0f} {p:>8.3f} {m:>8.3f} {p - m:>+9.3f}")
    print(f"{'all kernels':<26} {sum(calls.values()):>6.0f} {sum(kernels.values()):>8.3f} "
          f"{sum(measured.values()):>8.3f}")
    fb = phases.get("forward", 0) + phases.get("backward", 0)
    opt = sum(phases.get(p, 0) for p in ("clip_grad_norm", "adamw", "zero_grad"))
    print("phase (CPU ms per step)       predicted  measured")
    print(f"forward + backward (compute)  {pred['compute_ms']:>9.3f} {fb:>9.3f}")
    print(f"  of which op overhead        {pred['op_overhead_ms']:>9.3f}")
    print(f"norm + update + zero (optim)  {pred['optimizer_ms']:>9.3f} {opt:>9.3f}  "
          + " ".join(f"{p} {phases.get(p, 0):.3f}" for p in ("clip_grad_norm", "adamw",
                                                               "zero_grad")))
    print(f"outside every kernel                    {total['cpu_outside_kernels_ms']:>9.3f}")
    print(f"bench train step, profiled              {total['cpu_ms_per_step_profiled']:>9.3f}")
    print(f"bench train step, unprofiled (rusage)   {step['cpu_ms_per_step']:>9.3f}")
    print(f"tessel train step_cpu_ms      {pred['step_ms'] - pred.get('load_ms', 0):>9.3f} "
          f"{train_cpu:>9.3f}  (predicted: load-free terms; wall step_ms {train_wall:.3f})")
    print("load average after: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
