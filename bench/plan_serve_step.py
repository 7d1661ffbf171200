#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The serving planner's decode step against measured decoding (docs/PLANNER.md, "Serving plans",
"Measured here"): writes a randomly initialised GPT-2 (configs/gpt2-124M.json unless --config),
calibrates this machine with `mpirun -np 2 tessel plan calibrate --quick` (one thread per rank)
unless --cluster is given, asks `tessel plan --serve --batch 1 --json` for its decode rows, and
for each layout (one process, tp 2, pp 2) runs `tessel generate` greedily with the layout's --tp /
--pp (the parallel flags of the row's printed `tessel serve` command) and takes
generation_seconds / (gen − 1) as the measured time per decoded token. The layouts alternate run
by run, so a change in the machine's load reaches each. Prints per layout the prediction (the
roofline and collective terms, then with the load term) against the median measured ms/token and
both errors; the load average is printed before and after each run. Asserts nothing.

Usage: plan_serve_step.py TESSEL MPIRUN WORKDIR [--runs N] [--only tp1,tp2,pp2] [--cluster FILE]
                          [--config CONFIG] [--prompt T] [--gen G] [--json FILE]
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
from tessel_runs import fail, mpi_prefix, run, single_thread_env  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LAYOUTS = {"tp1": (1, 1), "tp2": (2, 1), "pp2": (1, 2)}  # key: (tp, pp)


def decode_row(rows, tp, pp):
    """The runnable batch-1 decode row of (tp, pp) (no experts)."""
    for r in rows:
        if r["tp"] == tp and r["pp"] == pp and r.get("ep", 1) == 1 and r["batch"] == 1 and \
                r["runnable"]:
            return r
    fail(f"no runnable decode row at tp {tp} pp {pp}: "
         f"{[(r['layout'], r['batch'], r['runnable']) for r in rows]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tessel")
    ap.add_argument("mpirun")
    ap.add_argument("work")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="tp1,tp2,pp2")
    ap.add_argument("--cluster", default="")
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "gpt2-124M.json"))
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    keys = a.only.split(",")
    if any(k not in LAYOUTS for k in keys):
        fail(f"--only takes {', '.join(LAYOUTS)}")
    tessel = os.path.abspath(a.tessel)
    env = single_thread_env()
    start = time.time()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "model")
    run([tessel, "init", "--config", a.config, "--out", model, "--force"], env=env)
    load_before = os.getloadavg()
    print("load average before calibrating: %.2f %.2f %.2f" % load_before, flush=True)
    cluster = a.cluster or os.path.join(a.work, "machine.toml")
    if not a.cluster:
        run(mpi_prefix(a.mpirun) + ["-np", "2", tessel, "plan", "calibrate", "--quick", "-o",
                                    cluster], env=env)
    plan = json.loads(run([tessel, "plan", "--serve", "--model", model, "--cluster", cluster,
                           "--devices", "2", "--prompt", str(a.prompt), "--gen", str(a.gen),
                           "--batch", "1", "--json"], env=env).stdout)
    preds = {k: decode_row(plan["decode"], *LAYOUTS[k]) for k in keys}
    ids = ",".join(str(11 + 7 * i) for i in range(a.prompt))
    measured = {k: [] for k in keys}
    for i in range(a.runs):
        for k in keys:
            tp, pp = LAYOUTS[k]
            cmd = [tessel, "generate", "-m", model, "--prompt-ids", ids, "-n", str(a.gen),
                   "--temp", "0", "--ignore-eos", "--format", "json"]
            if tp * pp > 1:
                cmd = mpi_prefix(a.mpirun) + ["-np", str(tp * pp)] + cmd + \
                    (["--tp", str(tp)] if tp > 1 else ["--pp", str(pp)])
            out = run(cmd, env=env).stdout
            # Under mpirun every rank may print; rank 0's JSON is the first line that parses.
            res = next(json.loads(line) for line in out.splitlines()
                       if line.startswith("{") and "generation_seconds" in line)
            ms = 1e3 * res["generation_seconds"] / (a.gen - 1)
            measured[k].append(ms)
            print(f"run {i + 1} {k}: {ms:.1f} ms/token (load %.2f)" % os.getloadavg()[0],
                  flush=True)
    print(f"{'layout':<8} {'free ms':>8} {'pred ms':>8} {'meas ms':>8} {'err free':>9} "
          f"{'err pred':>9}  terms (ms); runs")
    rows = []
    for k in keys:
        p = preds[k]
        med = statistics.median(measured[k])
        free = p["latency_ms"] - p.get("load_ms", 0)
        terms = {t[:-3]: p[t] for t in ("compute_ms", "memory_ms", "overhead_ms", "comm_ms",
                                          "pipeline_ms", "load_ms") if p.get(t)}
        print(f"{k:<8} {free:>8.2f} {p['latency_ms']:>8.2f} {med:>8.2f} "
              f"{100 * (free - med) / med:>8.1f}% {100 * (p['latency_ms'] - med) / med:>8.1f}%  "
              + " ".join(f"{t} {v:.2f}" for t, v in terms.items())
              + "; " + ", ".join(f"{m:.1f}" for m in measured[k]), flush=True)
        rows.append({"key": k, "layout": p["layout"], "command": p.get("command"),
                     "predicted_ms_per_token": p["latency_ms"], "load_free_ms": free,
                     "terms_ms": terms, "measured_ms_per_token": measured[k],
                     "median_ms": med, "kv_bytes_per_rank": p["kv_bytes_per_rank"],
                     "weight_bytes_per_rank": p["weight_bytes_per_rank"]})
    with open(cluster) as f:
        calibrated = {line.split("=")[0].strip(): line.split("=")[1].split("#")[0].strip()
                      for line in f if line.startswith(("cpu_share", "op_overhead",
                                                        "memory_bandwidth", "latency"))}
    print("calibrated: " + "; ".join(f"{k} = {v}" for k, v in calibrated.items()), flush=True)
    print(f"{time.time() - start:.0f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"prompt": a.prompt, "gen": a.gen, "load_average_before": load_before[0],
                       "calibrated": calibrated, "rows": rows}, f, indent=1)
    shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
