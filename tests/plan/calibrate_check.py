#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel plan calibrate` writes descriptions the planner's reader accepts.

1. Two ranks under mpirun (--quick -o FILE): one node of two devices, a measured in-node link,
   send_recv and all_reduce fits over two ranks, GEMM rates over the grid of shapes in the three
   layouts a step uses (bf16 too when the CPU has bf16 arithmetic), the other kernels' measured
   calls, the op overhead, progress on stderr, nothing but the file on stdout; `tessel plan
   memory --cluster FILE` reads it and charges the overhead.
2. One rank without a launcher, TOML on stdout: one device, no links; with --disk DIR the disk's
   write and read bandwidth in [storage] (the test file removed), which `tessel plan offload
   --cluster FILE` turns into the step's NVMe time; a missing directory is one clear error.
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
    grid = 4 ** 3 * 3  # --quick: 4 sizes per axis, layouts nt, nn, tn
    check(c["gemm"] == grid * (2 if has_bf16 else 1), f"GEMM grid: {c['gemm']} points")
    check(c["gemm_layouts"] == ["nn", "nt", "tn"], f"GEMM layouts: {c['gemm_layouts']}")
    step_kernels = {"unary", "unary_backward", "binary", "reduce", "softmax", "softmax_backward",
                    "layer_norm", "layer_norm_backward", "cross_entropy", "cross_entropy_backward",
                    "embedding", "embedding_backward", "adamw", "attention", "attention_backward",
                    "convert"}
    check(set(c["kernels"]) == step_kernels, f"measured kernels: {c['kernels']}")
    check(c["kernel_dtypes"] == ["bf16", "f32"], f"kernel curves by dtype: {c['kernel_dtypes']}")
    check(c["kernel_points_warm"] == c["kernel_points"] and c["gemm_warm"] == c["gemm"],
          f"in-cache figures beside every evicted one: {c}")
    check(c["cache_bytes"] > 0, f"the private caches' size: {c['cache_bytes']}")
    check(c["op_overhead"] >= 0 and c["op_overhead_per_byte"] >= 0, "op overhead")
    with open(path) as f:
        text = f.read()
    check(("op_overhead = " in text) == (c["op_overhead"] > 0), "op_overhead written when measured")
    check(("op_overhead_per_byte = " in text) == (c["op_overhead_per_byte"] > 0),
          "op_overhead_per_byte written when measured")
    config = os.path.join(work, "tiny.json")
    with open(config, "w") as f:
        json.dump({"model_type": "gpt2", "vocab_size": 97, "n_positions": 16, "n_embd": 32,
                   "n_layer": 2, "n_head": 2}, f)
    r = run([tessel, "plan", "memory", "--model", config, "--micro-batch", "2", "--seq", "16",
             "--cluster", path, "--json"])
    check(r.returncode == 0, f"plan memory with the calibrated file: {r.stderr}")
    pred = json.loads(r.stdout)
    check(pred["step_ms"] > pred["compute_ms"] > 0, f"predicted step: {pred}")
    check((pred["op_overhead_ms"] > 0) == (c["op_overhead"] + c["op_overhead_per_byte"] > 0),
          f"overhead charged: {pred}")

    check("storage_read" not in c, f"no [storage] without --disk: {c}")

    disk = os.path.join(work, "disk")
    os.makedirs(disk)
    r = run([tessel, "plan", "calibrate", "--quick", "--disk", disk, "--disk-size", "16MiB"])
    check(r.returncode == 0, f"one-rank calibrate exited {r.returncode}: {r.stderr}")
    check("disk " + disk + ": write" in r.stderr, f"the disk's progress line: {r.stderr[-600:]}")
    check(os.listdir(disk) == [], f"the disk test file is left behind: {os.listdir(disk)}")
    single = os.path.join(work, "single.toml")
    with open(single, "w") as f:
        f.write(r.stdout)
    c = read(reader, single)
    check(c["devices_per_node"] == 1 and c["nodes"] == 1 and "intra_latency" not in c
          and c["collectives"] == [], f"one rank: one device, no links: {c}")
    check(c.get("storage_read", 0) > 1e6 and c.get("storage_write", 0) > 1e6,
          f"[storage] measured: {c}")
    # 48 chunks of 16 KiB, a working set of 14: most of the state on NVMe.
    r = run([tessel, "plan", "offload", "-m", config, "--chunk-size", "16KiB", "--device-budget",
             "224KiB", "--host-budget", "64KiB", "--nvme", "--seq", "16", "--cluster", single,
             "--json"])
    check(r.returncode == 0, f"plan offload with the calibrated file: {r.stderr}")
    t = json.loads(r.stdout)["time"]
    check(t["nvme_ms"] > 0 and t["compute_ms"] > 0 and
          t["step_ms"] == max(t["nvme_ms"], t["compute_ms"]) and
          abs(t["disk_read_gbps"] * 1e9 - c["storage_read"]) < 1e-3 * c["storage_read"],
          f"offload step time from [storage]: {t}")
    r = run([tessel, "plan", "calibrate", "--quick", "--disk", os.path.join(work, "missing")])
    check(r.returncode != 0 and "plan calibrate --disk: " in r.stderr and "missing" in r.stderr,
          f"a missing disk directory: rc {r.returncode}, {r.stderr[-400:]}")

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
