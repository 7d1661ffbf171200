#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel plan --check` on a tiny GPT-2 (3 layers x 36, 4 heads, T = 15, global batch 6) over a
described two-device node:

- `--check --top 2 --steps 2 --warmup 1 --json --out FILE.json` through mpirun: two rows, the
  search's two best layouts in order with `plan search`'s own predictions; each run measured
  (step time and peak > 0), and the measured figures equal what the run's train.jsonl says (the
  median step_ms after the warmup step; the fullest rank's mem_bytes + step_peak_bytes of the last
  step); errors, measured ranks and the ranking verdict consistent with them; --out equals stdout;
- the table (one rank, `--devices 1`, no launcher) with `--out FILE.jsonl`: a line per row and a
  summary line, and the table names both layouts and the median errors;
- errors: an --mpirun that is not there is named before any run; a run killed midway
  (fault.kill_at_step) and a run the trainer refuses (an unknown key) fail the check with their
  layout, exit status and the run's own last stderr line.

Usage: plan_check.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, prepare_workdir, run,  # noqa: E402
                         single_thread_env, step_records, write_json)

NODE = """name = "two-rank-test"
devices_per_node = 2
nodes = 1
[device]
kind = "test"
memory_bytes = 1099511627776
memory_bandwidth = 2e10
[device.peak_flops]
f32 = 3e10
[links.intra_node]
bandwidth = 5e9
latency = 3e-6
"""


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def check_rows(res, search, runs, warmup):
    rows = res["rows"]
    if len(rows) != 2 or res["runs"] != 2 or res["failed"] != 0:
        fail(f"expected 2 rows, none failed: {res}")
    for k, (row, pred) in enumerate(zip(rows, search["ranked"])):
        for key in ("predicted_step_ms", "measured_step_ms", "step_ms_error",
                    "predicted_peak_bytes", "measured_peak_bytes", "peak_error",
                    "measured_vm_hwm_bytes", "measured_rank", "train_args"):
            if key not in row:
                fail(f"row {k + 1} lacks {key}: {row}")
        if row["predicted_rank"] != k + 1 or row["layout"] != pred["layout"] or \
                not close(row["predicted_step_ms"], pred["step_ms"]) or \
                row["predicted_peak_bytes"] != pred["mem_peak_bytes"]:
            fail(f"row {k + 1} {row} is not the search's {pred}")
        if row["status"] != "ok" or row["measured_step_ms"] <= 0 or \
                row["measured_peak_bytes"] <= 0 or row["measured_vm_hwm_bytes"] <= 0:
            fail(f"row {k + 1} not measured: {row}")
        recs = step_records(os.path.join(runs, f"rank{k + 1}"))
        times = [r["step_ms"] for r in recs if r["step"] > warmup]
        last = recs[-1]
        peak = max(r["mem_bytes"] + r["step_peak_bytes"] for r in last["ranks"])
        if len(times) != row["measured_steps"] or \
                not close(statistics.median(times), row["measured_step_ms"]) or \
                peak != row["measured_peak_bytes"] or \
                row["measured_rank_peak_bytes"] != [r["mem_bytes"] + r["step_peak_bytes"]
                                                    for r in last["ranks"]] or \
                len(last["ranks"]) != row["dp"] * row["tp"] * row["pp"]:
            fail(f"row {k + 1}: measured {row['measured_step_ms']} ms, {row['measured_peak_bytes']} "
                 f"bytes; its train.jsonl says {times} ms, {peak} bytes over {len(last['ranks'])} ranks")
        want = (row["predicted_step_ms"] - row["measured_step_ms"]) / row["measured_step_ms"]
        want_peak = (row["predicted_peak_bytes"] - peak) / peak
        if not close(want, row["step_ms_error"]) or not close(want_peak, row["peak_error"]):
            fail(f"row {k + 1}: errors {row['step_ms_error']}, {row['peak_error']}; "
                 f"expected {want}, {want_peak}")
    by_time = sorted(rows, key=lambda r: r["measured_step_ms"])
    order = [r["predicted_rank"] for r in by_time]
    if res["measured_order"] != order or [r["measured_rank"] for r in rows] != \
            [by_time.index(r) + 1 for r in rows] or res["ranking_held"] != (order == [1, 2]):
        fail(f"ranking: {res['measured_order']} held {res['ranking_held']}, measured {order}")
    med = statistics.median(abs(r["step_ms_error"]) for r in rows)
    if not close(med, res["median_abs_step_ms_error"]):
        fail(f"median |error| {res['median_abs_step_ms_error']}, rows give {med}")


def main():
    tessel, mpirun, work = sys.argv[1:4]
    env = single_thread_env()
    try:
        vocab = prepare_workdir(tessel, work)
        config = write_json(os.path.join(work, "config.json"), gpt2_config(vocab, 32, 36, 3, 4))
        cluster = os.path.join(work, "node.toml")
        with open(cluster, "w") as f:
            f.write(NODE)
        base = [tessel, "plan", "--model", config, "--cluster", cluster, "--global-batch", "6",
                "--seq", "15"]
        check = ["--check", "--data", os.path.join(work, "data"), "--mpirun", mpirun]
        search = json.loads(run(base + ["--json"], env=env).stdout)

        # Two-rank layouts through mpirun, JSON on stdout and in --out.
        runs = os.path.join(work, "runs")
        out = os.path.join(work, "check.json")
        p = run(base + check + ["--top", "2", "--steps", "2", "--warmup", "1", "--json",
                                "--out", out, "--workdir", runs], env=env)
        res = json.loads(p.stdout)
        check_rows(res, search, runs, 1)
        with open(out) as f:
            if json.load(f) != res:
                fail("--out differs from the printed JSON")
        for k in (1, 2):
            if f"[{k}/2] step 3/3" not in p.stderr:
                fail(f"no progress line for run {k}: {p.stderr[-2000:]}")
        for r in res["rows"]:
            print(f"{r['layout']}: predicted {r['predicted_step_ms']:.3f} ms, measured "
                  f"{r['measured_step_ms']:.3f} ms; peak {r['predicted_peak_bytes']} vs "
                  f"{r['measured_peak_bytes']} bytes ({100 * r['peak_error']:+.2f}%)")

        # One rank (no launcher needed), the table, JSONL --out.
        out = os.path.join(work, "check.jsonl")
        table = run(base + check + ["--devices", "1", "--top", "2", "--steps", "1", "--warmup",
                                    "1", "--out", out, "--workdir", os.path.join(work, "one")],
                    env=env).stdout
        print(table)
        with open(out) as f:
            lines = [json.loads(line) for line in f]
        if len(lines) != 3 or "summary" not in lines[2] or \
                any(r["status"] != "ok" or r["measured_step_ms"] <= 0 or r["dp"] != 1
                    for r in lines[:2]):
            fail(f"JSONL --out: {lines}")
        for r in lines[:2]:
            if r["layout"] not in table:
                fail(f"the table lacks {r['layout']}")
        if "# median |error|" not in table or "# predicted ranking" not in table:
            fail("the table lacks its summary lines")

        # Errors.
        p = subprocess.run(base + ["--check", "--data", os.path.join(work, "data"), "--mpirun",
                                   os.path.join(work, "no-such-mpirun")],
                           capture_output=True, text=True, env=env)
        if p.returncode == 0 or "no-such-mpirun" not in p.stderr or "[1/" in p.stderr:
            fail(f"missing --mpirun: exit {p.returncode}, stderr {p.stderr!r}")
        print("missing mpirun:", p.stderr.strip().splitlines()[-1])
        for what, sets in (("killed", "fault.kill_at_step=2"), ("refused", "train.no_such_key=1")):
            d = os.path.join(work, what)
            p = subprocess.run(base + check + ["--top", "1", "--steps", "2", "--warmup", "1",
                                               "--workdir", d, "--set", sets],
                               capture_output=True, text=True, env=env)
            with open(os.path.join(d, "rank1", "stderr.log")) as f:
                lines = [line for line in f.read().splitlines() if any(c.isalnum() for c in line)]
            errors = [line for line in lines if "tessel: error:" in line]
            last = (errors or lines)[-1]
            if p.returncode == 0 or "1 of 1 runs failed" not in p.stderr or \
                    search["ranked"][0]["layout"] not in p.stderr or last not in p.stderr or \
                    ("exited with status" not in p.stderr and "killed by signal" not in p.stderr):
                fail(f"{what} run: exit {p.returncode}, stderr {p.stderr[-3000:]!r}, the run's "
                     f"last line {last!r}")
            if what == "refused" and ("no_such_key" not in last or not errors):
                fail(f"the trainer's refusal does not name the key: {last!r}")
            print(f"{what} run:", p.stderr.strip().splitlines()[-1][:300])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
