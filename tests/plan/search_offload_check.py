#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel plan search --offload` (docs/PLANNER.md, "Offload in the search") on a CPU node whose
memory no layout of a small GPT-2 fits, and the plan's own command run:

- without --offload the search fails naming the least memory per rank; --offload without an NVMe
  directory is refused naming the flag;
- with it every ranked layout is offloaded, its budgets (what the step keeps outside the tiers,
  the device and host tiers) within the node's memory, its step no shorter than its disk time,
  and its `train_args` carry the memory.* settings; the table prints the offloaded line;
- `tessel train` with the best layout's arguments trains (the trainer's own start-up checks
  accept the budgets), every tier holds chunks, and each step's NVMe bytes read and written from
  the second on are the plan's within 3 chunks or 10% (prefetch on, as the command runs it).

With MPIRUN, on a node of four devices whose memory no dp 2 x pp 2 layout fits: the search
ranks such layouts offloaded (their schedules' holds recorded from the runtime's objects), and
`mpirun -np 4 tessel train` with the best one's arguments moves the plan's NVMe bytes a step
on rank 0, within the same bound.

A GPT-2 with C = 26, 2 heads, 5 blocks and sequences of 9, global batch 2 (4 on four devices).

Usage: search_offload_check.py TESSEL WORKDIR [MPIRUN]
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from offload_runs import small_gpt2  # noqa: E402
from tessel_runs import (fail, mpi_prefix, prepare_workdir, remove_workdir,  # noqa: E402
                         run, single_thread_env, step_records, train_sets)

CHUNK = 32 << 10  # the largest tensor, the 257 x 26 embedding, fits one
STEPS = 4
READ, WRITE = 2e9, 1e9

NODE = """name = "offload-test"
devices_per_node = 1
nodes = 1
[device]
kind = "cpu (offload test)"
memory_bytes = {memory}
memory_bandwidth = 2e10
[device.peak_flops]
f32 = 3e10
[storage]
read_bandwidth = {read}
write_bandwidth = {write}
"""


LINKS = """[links.intra_node]
bandwidth = 5e9
latency = 3e-6
"""


def node(work, name, memory, devices=1):
    path = os.path.join(work, name)
    text = NODE.format(memory=int(memory), read=READ, write=WRITE)
    if devices > 1:
        text = text.replace("devices_per_node = 1", f"devices_per_node = {devices}") + LINKS
    with open(path, "w") as f:
        f.write(text)
    return path


def search(tessel, config, cluster, extra=(), json_out=True, check=True, batch=2):
    cmd = [tessel, "plan", "search", "-m", config, "--cluster", cluster, "-B", str(batch), "-t",
           "9", "--top", "1000"] + (["--json"] if json_out else []) + list(extra)
    if check:
        p = run(cmd, env=single_thread_env())
        return json.loads(p.stdout) if json_out else p.stdout
    return subprocess.run(cmd, capture_output=True, text=True, env=single_thread_env())


def main():
    tessel, work = sys.argv[1], sys.argv[2]
    vocab = prepare_workdir(tessel, work)
    config = small_gpt2(work, vocab)
    nvme = os.path.join(work, "nvme")
    os.makedirs(nvme)

    roomy = search(tessel, config, node(work, "roomy.toml", 1 << 40))
    least = min(r["mem_peak_bytes"] for r in roomy["ranked"])
    # The state in chunks and the working set, from every chunk on the device.
    probe = json.loads(run([tessel, "plan", "offload", "-m", config, "--chunk-size", str(CHUNK),
                            "--device-budget", "1GiB", "--host-budget", str(5 * CHUNK), "--nvme",
                            "--json"]).stdout)
    ws, chunks = probe["device_working_set"], probe["chunks"]
    if chunks < ws + 8:
        fail(f"the model's {chunks} chunks leave no state for NVMe beside a working set of {ws}")
    # The least layout's device tier: its working set and three chunks more.
    memory = least - probe["state_bytes"] + (5 + ws + 3) * CHUNK
    tight = node(work, "tight.toml", memory)

    p = search(tessel, config, tight, check=False)
    if p.returncode == 0 or "the least it needs is" not in p.stderr:
        fail(f"a search without --offload on {memory} bytes did not fail naming the least memory:"
             f" {p.returncode}\n{p.stderr}")
    p = search(tessel, config, tight, ["--offload"], check=False)
    if p.returncode == 0 or "--offload-nvme-dir" not in p.stderr:
        fail(f"--offload without an NVMe directory was not refused naming it: {p.stderr}")

    flags = ["--offload", "--offload-chunk-size", str(CHUNK), "--offload-nvme-dir", nvme]
    res = search(tessel, config, tight, flags)
    if not res["ranked"]:
        fail(f"no layout offloaded on {memory} bytes: {res['pruned']}")
    for r in res["ranked"]:
        o = r.get("offload")
        if o is None:
            fail(f"{r['layout']} is ranked without offload on a node nothing fits: {r}")
        held = o["plain_bytes"] + o["device_budget"] + o["host_budget"]
        if held > memory or o["device_budget"] % CHUNK or o["host_budget"] != 5 * CHUNK:
            fail(f"{r['layout']}: budgets {o} hold {held} bytes of a node of {memory}")
        if r["step_ms"] < o["nvme_ms"] or o["offload_nvme_read_bytes"] <= 0:
            fail(f"{r['layout']}: step {r['step_ms']} ms against the disk's {o['nvme_ms']} ms: {o}")
        for s in (f"memory.device_budget={o['device_budget']}", f"memory.nvme_dir={nvme}",
                  f"memory.host_budget={5 * CHUNK}", f"memory.chunk_size={CHUNK}"):
            if s not in r["train_args"]:
                fail(f"{r['layout']}: {s} is not in its command {r['train_args']}")
    table = search(tessel, config, tight, flags, json_out=False)
    if "offloaded:" not in table or "offload=" not in table:
        fail(f"the table shows no offloaded layout:\n{table}")

    best = res["ranked"][0]
    measured = train_as_planned(tessel, config, work, "run", best)
    print(f"plan search --offload: {len(res['ranked'])} offloaded layouts on {memory} bytes; "
          f"the best ({best['layout']}) trained {STEPS} steps, NVMe bytes read / written per step "
          f"{measured} against the plan's {best['offload']['offload_nvme_read_bytes']} / "
          f"{best['offload']['offload_nvme_write_bytes']}")
    if len(sys.argv) > 3:
        pipeline_dp(tessel, config, work, sys.argv[3])
    remove_workdir(work)


def train_as_planned(tessel, config, work, tag, best, launch=(), chunk=CHUNK):
    """`tessel train` with the plan's arguments; each step's NVMe bytes (rank 0's) from the
    second on within 3 chunks or 10% of the plan's, and chunks in every tier."""
    d = os.path.join(work, tag)
    cmd = list(launch) + [tessel, "train"] + train_sets(
        config, os.path.join(work, "data"), STEPS, seq_len=9,
        extra=[f"checkpoint.dir={d}", "checkpoint.interval=0"]) + best["train_args"]
    run(cmd, env=single_thread_env())
    recs = step_records(d)
    if len(recs) != STEPS:
        fail(f"the plan's command ran {len(recs)} of {STEPS} steps")
    want = best["offload"]
    measured = [(r["offload"]["nvme_read_bytes"], r["offload"]["nvme_write_bytes"])
                for r in recs[1:]]
    for r in recs[1:]:
        o = r["offload"]
        if not (o["device_bytes"] > 0 and o["host_bytes"] > 0 and o["nvme_bytes"] > 0):
            fail(f"step {r['step']} did not hold chunks in every tier: {o}")
        for key in ("nvme_read_bytes", "nvme_write_bytes"):
            got, exp = o[key], want["offload_" + key]
            if abs(got - exp) > max(3 * chunk, 0.1 * exp):
                fail(f"step {r['step']}: {key} {got} against the plan's {exp} "
                     f"(layout {best['layout']})")
    return measured


def pipeline_dp(tessel, config, work, mpirun):
    """Four devices a little smaller than the least dp 2 x pp 2 ZeRO-3 layout needs."""
    chunk = 20 << 10  # the largest ZeRO-3 shard, a block's 16,900 bytes, fits one
    roomy = search(tessel, config, node(work, "roomy4.toml", 1 << 40, devices=4), batch=4)
    pipelined = [r for r in roomy["ranked"] if "dp=2 tp=1 pp=2 zero=3" in r["layout"]]
    if not pipelined:
        fail("no dp 2 x pp 2 ZeRO-3 layout ranked on four roomy devices")
    memory = min(r["mem_peak_bytes"] for r in pipelined) - (16 << 10)
    nvme = os.path.join(work, "nvme4")
    os.makedirs(nvme)
    res = search(tessel, config, node(work, "tight4.toml", memory, devices=4),
                 ["--offload", "--offload-chunk-size", str(chunk), "--offload-nvme-dir", nvme],
                 batch=4)
    offloaded = [r for r in res["ranked"]
                 if "dp=2 tp=1 pp=2" in r["layout"] and r.get("offload")]
    if not offloaded:
        fail(f"no dp 2 x pp 2 layout offloaded on four devices of {memory} bytes: "
             f"{[(r['layout'], r['reason']) for r in res['pruned'] if 'pp=2' in r['layout']]}")
    best = offloaded[0]
    measured = train_as_planned(tessel, config, work, "run4", best,
                                mpi_prefix(mpirun) + ["-np", "4"], chunk)
    print(f"four devices of {memory} bytes: {len(offloaded)} dp 2 x pp 2 layouts offloaded; "
          f"{best['layout']} trained {STEPS} steps, rank 0's NVMe bytes read / written per step "
          f"{measured} against the plan's {best['offload']['offload_nvme_read_bytes']} / "
          f"{best['offload']['offload_nvme_write_bytes']}")


if __name__ == "__main__":
    main()
