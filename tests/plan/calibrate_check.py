#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel plan calibrate` writes descriptions the planner's reader accepts.

1. Two ranks under mpirun (--quick -o FILE): one node of two devices, a measured in-node link,
   send_recv and all_reduce fits over two ranks, GEMM rates (bf16 too when the CPU has bf16
   arithmetic), progress on stderr, nothing but the file on stdout.
2. One rank without a launcher, TOML on stdout: one device, no links.
3. The written file with an unknown key is refused by the reader, naming the key.

Usage: calibrate_check.py TESSEL MPIEXEC READER WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)


def read(reader, path):
    r = run([reader, path])
    if r.returncode != 0:
        sys.exit(f"the reader refused {path}: {r.stderr}")
    return json.loads(r.stdout)


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


def main():
    tessel, mpiexec, reader, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    version = run([tessel, "--version"]).stdout
    has_bf16 = "avx512_bf16" in version.split() or "amx_bf16" in version.split()

    path = os.path.join(work, "calibrated.toml")
    r = run([mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2", tessel, "plan",
             "calibrate", "--quick", "-o", path])
    print(r.stderr)
    check(r.returncode == 0, f"mpirun calibrate exited {r.returncode}")
    check(r.stdout.strip() == "", f"stdout should be empty with -o, got {r.stdout!r}")
    check("gemm f32 1024x1024x1024" in r.stderr and "all_reduce fit" in r.stderr,
          "progress lines missing on stderr")
    check(not os.path.exists(path + ".tmp"), "temporary file left behind")
    c = read(reader, path)
    print(json.dumps(c))
    check(c["devices_per_node"] == 2 and c["nodes"] == 1, "two ranks on one host: 1 node of 2")
    check(c["intra_latency"] > 0 and c["intra_bandwidth"] > 0, "in-node link measured")
    ops = {(x["op"], x["ranks"]) for x in c["collectives"]}
    check(ops == {("send_recv", 2), ("all_reduce", 2)}, f"collective fits: {ops}")
    check(c["gemm"] >= 4 and c["peak_f32"] > 1e8, "f32 GEMM table and peak")
    check((c["gemm_bf16"] > 0) == has_bf16 and (c["peak_bf16"] > 0) == has_bf16,
          f"bf16 GEMM rates exactly when the CPU has bf16 arithmetic ({has_bf16})")
    check(c["memory_bandwidth"] > 1e8 and c["memory_bytes"] > 1 << 26, "memory figures")

    r = run([tessel, "plan", "calibrate", "--quick"])
    check(r.returncode == 0, f"one-rank calibrate exited {r.returncode}: {r.stderr}")
    single = os.path.join(work, "single.toml")
    with open(single, "w") as f:
        f.write(r.stdout)
    c = read(reader, single)
    check(c["devices_per_node"] == 1 and c["nodes"] == 1 and "intra_latency" not in c
          and c["collectives"] == [], f"one rank: one device, no links: {c}")

    bad = os.path.join(work, "bad.toml")
    with open(path) as f:
        text = f.read()
    with open(bad, "w") as f:
        f.write(text.replace("[device]\n", "[device]\nthreads = 2\n", 1))
    r = run([reader, bad])
    check(r.returncode == 1 and "unknown key 'device.threads'" in r.stderr and "bad.toml" in r.stderr,
          f"an unknown key is refused by name: {r.stderr}")
    print("calibrate_check: ok")


if __name__ == "__main__":
    main()
