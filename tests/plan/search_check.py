#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tessel plan search` and `tessel train --plan auto` on a tiny GPT-2 (3 layers x 36, 4 heads,
T = 15, global batch 6) over 2 ranks of a described node whose memory is the median of the
layouts' predicted peaks, so some layouts do not fit:

- the search's ranked table holds only layouts that fit and the rest are named as out of memory;
- a ranked tp layout (with and without sequence parallelism) and ranked gpipe and 1f1b pp
  layouts carry `tessel plan memory`'s figures
  (memory, step time, op overhead, load term), and every ranked row carries its own `tessel
  train` flags (`train_args`);
- `--tp-plan FILE`: an MLP-only plan searched beside the built-in one, its rows flagged with the
  file and holding `plan memory --tp-plan`'s figures; a plan the runtime refuses, one invalid row;
  `--shard-plans DIR`: the sharding ILP's plan for tp 2 written there (as `plan shard` writes it)
  and searched the same way; under sequence parallelism its own plan (`plan shard --sp`'s, with
  the Sequence modules), searched with the sp layouts only and predicted as the built-in plan;
- a node whose memory lies between a pipeline layout's ranks' peaks: that layout with each rank's
  least recomputation that fits (train.recompute = "full,none"), with `plan memory`'s figures;
- GPT-2 124M at 1,024 tokens: the inter-operator DP's stage split is ranked beside the balanced
  stages, with parallel.pipeline_split in its flags and `plan memory --pipeline-split`'s figures;
- `mpirun -np 2 tessel train --plan auto --cluster C` trains with the search's best plan, and a
  run with the printed explicit flags gives the same losses and gradient norms, step by step;
  again with one sequence per step, where dp 2 is invalid and the best plan is a tp or pp layout;
- both runs' JSONL carry the plan's predicted step time and memory per rank beside the measured;
- a node whose memory nothing fits: `plan search` and `train --plan auto` fail with one message
  naming the least memory per rank (the smallest out-of-memory figure of the search);
- malformed cluster files (an unknown key, a mistyped value) are refused naming the key.

Usage: search_check.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, step_records, train_sets, write_json)

NODE = """name = "two-rank-test"
devices_per_node = 2
nodes = 1
[device]
kind = "test"
memory_bytes = {memory}
memory_bandwidth = 2e10
[device.peak_flops]
f32 = 3e10
[links.intra_node]
bandwidth = 5e9
latency = 3e-6
"""


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def search(tessel, config, cluster, env, check=True, extra=(), batch=6):
    p = subprocess.run([tessel, "plan", "search", "--model", config, "--cluster", cluster,
                        "--global-batch", str(batch), "--seq", "15", "--json", *extra],
                       capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        fail(f"plan search: exit {p.returncode}: {p.stderr}")
    return p


def check_against_plan_memory(tessel, config, cluster, res, env):
    """A ranked tp layout and a ranked pp layout of each schedule (interleaved with two chunks per
    rank among them) carry `tessel plan memory`'s own figures for the same layout (the largest
    pipeline rank's memory, the pipeline step time)."""
    picks = {}
    for r in res["ranked"]:
        # Each row's own `tessel train` flags: what a benchmark of that row launches.
        args = ["--dp", str(r["dp"]), "--tp", str(r["tp"]), "--pp", str(r["pp"]),
                "--set", f"parallel.zero_stage={r['zero_stage']}",
                "--set", f"train.recompute={r['recompute']}",
                "--set", f"train.micro_batch={r['micro_batch']}",
                "--set", f"train.grad_accum={r['grad_accum']}"]
        if r["sp"]:
            args += ["--set", "parallel.sequence_parallel=true"]
        if r["pp"] > 1:
            args += ["--schedule", r["schedule"]]
            if r["pipeline_split"]:
                args += ["--set", f"parallel.pipeline_split={r['pipeline_split']}"]
        if r.get("train_args") != args:
            fail(f"{r['layout']}: train_args {r.get('train_args')}, expected {args}")
        if r["tp"] > 1 or r["pp"] > 1:
            picks.setdefault((r["tp"], r["pp"], r.get("schedule"), r["sp"],
                              r.get("pipeline_split", "")), r)
    if not any(k[0] > 1 for k in picks) or \
            {k[2] for k in picks if k[1] > 1} != {"gpipe", "1f1b", "interleaved:2"}:
        fail(f"the search ranked no tp layout or not every pipeline schedule (gpipe, 1f1b, "
             f"interleaved:2): {sorted(picks, key=str)}")
    if not any(k[3] for k in picks):
        fail(f"the search ranked no sequence-parallel layout: {sorted(picks, key=str)}")
    for (tp, pp, schedule, sp, split), r in sorted(picks.items(), key=str):
        cmd = [tessel, "plan", "memory", "--model", config, "--cluster", cluster, "--json",
               "--dp", str(r["dp"]), "--tp", str(tp), "--pp", str(pp), "--zero",
               str(r["zero_stage"]), "--recompute", r["recompute"], "--micro-batch",
               str(r["micro_batch"]), "--grad-accum", str(r["grad_accum"]), "--seq", "15"]
        if schedule:
            cmd += ["--schedule", schedule]
        if split:
            cmd += ["--pipeline-split", split]
        if sp:
            cmd.append("--sp")
        m = json.loads(run(cmd, env=env).stdout)
        if m["mem_peak_bytes"] != r["mem_peak_bytes"] or \
                any(abs(m.get(k, 0) - r[k]) > 1e-9 * r["step_ms"]
                    for k in ("step_ms", "op_overhead_ms", "load_ms")):
            fail(f"{r['layout']}: search {r['mem_peak_bytes']} bytes {r['step_ms']} ms (overhead "
                 f"{r['op_overhead_ms']}, load {r['load_ms']}), plan memory {m['mem_peak_bytes']} "
                 f"bytes {m['step_ms']} ms ({m.get('op_overhead_ms')}, {m.get('load_ms')})")
        print(f"{r['layout']}: {r['step_ms']:.3f} ms (bubble {r['bubble_ms']:.3f} ms, tp comm "
              f"{r['tp_comm_ms']:.3f} ms), {r['mem_peak_bytes']} bytes per rank, as plan memory")


def rank_recompute_against_plan_memory(tessel, config, every, work, env):
    """With the node's memory between a pipeline layout's ranks' peaks, the search also ranks that
    layout with each rank's least recomputation that fits (train.recompute = "full,none" in its
    flags), its ranks' peaks those of the layouts with one mode, and `plan memory --recompute
    full,none` gives its figures; `--rank-recompute off` ranks no such row."""
    order = ["none", "selective", "full"]
    groups = {}
    for r in every["ranked"]:
        if r["pp"] == 2 and r["schedule"] in ("1f1b", "gpipe") and not r["pipeline_split"]:
            groups.setdefault((r["schedule"], r["micro_batch"]), {})[r["recompute"]] = r
    def assign(by_mode, memory):
        modes = []
        for rank in range(2):
            fit = [m for m in order if m in by_mode and by_mode[m]["rank_peak_bytes"][rank] <= memory]
            if not fit:
                return None
            modes.append(fit[0])
        return modes
    picks = [(key, memory, modes) for key, by_mode in sorted(groups.items())
             for r in by_mode.values() for memory in r["rank_peak_bytes"]
             for modes in [assign(by_mode, memory)] if modes and modes[0] != modes[1]]
    if not picks:
        fail(f"no pipeline layout whose ranks' least fitting modes differ: {sorted(groups)}")
    (schedule, mb), memory, modes = picks[0]
    spec = ",".join(modes)
    cluster = write(os.path.join(work, "ranks.toml"), NODE.format(memory=memory))
    extra = ["--top", "1000", "--schedules", schedule, "--stage-split", "balanced"]
    res = json.loads(search(tessel, config, cluster, env, extra=extra).stdout)
    rows = [r for r in res["ranked"] if r["pp"] == 2 and r["micro_batch"] == mb
            and "," in r["recompute"] and ":" not in r["recompute"]]
    if len(rows) != 1 or rows[0]["recompute"] != spec:
        fail(f"{schedule} micro-batch {mb} at {memory} bytes: expected one row with recompute "
             f"{spec}, got {[x['layout'] for x in rows]}")
    r = rows[0]
    if f"train.recompute={spec}" not in r["train_args"]:
        fail(f"{r['layout']}: train_args {r['train_args']} without train.recompute={spec}")
    want = [groups[(schedule, mb)][modes[k]]["rank_peak_bytes"][k] for k in range(2)]
    if r["rank_peak_bytes"] != want:
        fail(f"{r['layout']}: rank peaks {r['rank_peak_bytes']}, the one-mode layouts' {want}")
    m = json.loads(run([tessel, "plan", "memory", "--model", config, "--cluster", cluster, "--json",
                        "--pp", "2", "--schedule", schedule, "--recompute", spec,
                        "--micro-batch", str(mb), "--grad-accum", str(r["grad_accum"]),
                        "--seq", "15"], env=env).stdout)
    if m["mem_peak_bytes"] != r["mem_peak_bytes"] or abs(m["step_ms"] - r["step_ms"]) > 1e-9 * r["step_ms"] \
            or [x["mem_peak_bytes"] for x in m["pp_ranks"]] != want:
        fail(f"{r['layout']}: search {r['mem_peak_bytes']} bytes {r['step_ms']} ms, plan memory "
             f"--recompute {spec} {m['mem_peak_bytes']} bytes {m['step_ms']} ms {m['pp_ranks']}")
    uniform = [x for x in res["ranked"] if x["pp"] == 2 and x["micro_batch"] == mb
               and "," not in x["recompute"] and ":" not in x["recompute"]]
    if any(x["step_ms"] < r["step_ms"] for x in uniform):
        fail(f"{r['layout']} ({r['step_ms']} ms) slower than a one-mode layout that fits: "
             f"{[(x['layout'], x['step_ms']) for x in uniform]}")
    print(f"{r['layout']} at {memory} bytes: ranks {want} bytes, {r['step_ms']:.3f} ms against "
          f"{[(x['recompute'], round(x['step_ms'], 3)) for x in uniform]}, as plan memory")
    # A mode on a rank's first blocks only (train.recompute = "full:1,none"): `plan memory`'s
    # figures, within the node, no slower than the same layout's other rows.
    blocks = [x for x in res["ranked"] if x["pp"] == 2 and ":" in x["recompute"]]
    for x in blocks:
        m = json.loads(run([tessel, "plan", "memory", "--model", config, "--cluster", cluster,
                            "--json", "--pp", "2", "--schedule", x["schedule"], "--recompute",
                            x["recompute"], "--micro-batch", str(x["micro_batch"]),
                            "--grad-accum", str(x["grad_accum"]), "--seq", "15"], env=env).stdout)
        if m["mem_peak_bytes"] != x["mem_peak_bytes"] or x["mem_peak_bytes"] > memory \
                or abs(m["step_ms"] - x["step_ms"]) > 1e-9 * x["step_ms"]:
            fail(f"{x['layout']}: search {x['mem_peak_bytes']} bytes {x['step_ms']} ms, plan memory "
                 f"--recompute {x['recompute']} {m['mem_peak_bytes']} bytes {m['step_ms']} ms")
        if f"train.recompute={x['recompute']}" not in x["train_args"]:
            fail(f"{x['layout']}: train_args {x['train_args']} without its train.recompute")
        same = [y for y in res["ranked"] if y["pp"] == 2 and y["micro_batch"] == x["micro_batch"]
                and y["schedule"] == x["schedule"] and not y["pipeline_split"]
                and ":" not in y["recompute"]]
        if any(y["step_ms"] < x["step_ms"] for y in same):
            fail(f"{x['layout']} ({x['step_ms']} ms) slower than a row without counts: "
                 f"{[(y['layout'], y['step_ms']) for y in same]}")
    print(f"{len(blocks)} rows with a mode on a rank's first blocks, as plan memory: "
          f"{[x['recompute'] for x in blocks]}")
    off = json.loads(search(tessel, config, cluster, env,
                            extra=extra + ["--rank-recompute", "off", "--block-recompute", "off"]).stdout)
    if any("," in x["recompute"] for x in off["ranked"] + off["pruned"]):
        fail("--rank-recompute off ranked a mode per rank")
    off = json.loads(search(tessel, config, cluster, env, extra=extra + ["--block-recompute", "off"]).stdout)
    if any(":" in x["recompute"] for x in off["ranked"] + off["pruned"]):
        fail("--block-recompute off ranked a count of blocks")


def dp_split_against_plan_memory(tessel, cluster, env):
    """GPT-2 124M at 1,024 tokens over 2 ranks: the inter-operator DP cuts its pipeline where the
    runtime's balance by parameters does not (the tied head's weights are many, its compute one
    product), so the search ranks the 1F1B layout twice, balanced and with the DP's split; the
    split row carries parallel.pipeline_split in its flags and `tessel plan memory
    --pipeline-split`'s figures for them; `--stage-split balanced` ranks no split. The same for
    the interleaved schedules' chunks."""
    args = ["--model", "124M", "--cluster", cluster, "--global-batch", "2", "--seq", "1024",
            "--json", "--schedules", "1f1b", "--recompute", "none", "--zero", "0",
            "--sequence-parallel", "off", "--max-micro-batch", "1", "--top", "100"]
    res = json.loads(run([tessel, "plan", "search", *args], env=env).stdout)
    rows = [r for r in res["ranked"] if r["pp"] == 2]
    split = [r for r in rows if r["pipeline_split"]]
    if len(rows) != 2 or len(split) != 1:
        fail(f"124M pp 2: expected the balanced and the DP's split ranked, got "
             f"{[(r['layout'], r['pipeline_split']) for r in rows]}")
    r = split[0]
    if r["train_args"][-2:] != ["--set", f"parallel.pipeline_split={r['pipeline_split']}"]:
        fail(f"{r['layout']}: train_args {r['train_args']} without its split")
    m = json.loads(run([tessel, "plan", "memory", "--model", "124M", "--cluster", cluster,
                        "--json", "--pp", "2", "--schedule", "1f1b", "--grad-accum", "2",
                        "--seq", "1024", "--pipeline-split", r["pipeline_split"]],
                       env=env).stdout)
    if m["mem_peak_bytes"] != r["mem_peak_bytes"] or abs(m["step_ms"] - r["step_ms"]) > \
            1e-9 * r["step_ms"]:
        fail(f"{r['layout']}: search {r['mem_peak_bytes']} bytes {r['step_ms']} ms, plan memory "
             f"--pipeline-split {m['mem_peak_bytes']} bytes {m['step_ms']} ms")
    other = [x for x in rows if not x["pipeline_split"]][0]
    print(f"124M pp 2: the DP's split {r['pipeline_split']} predicted {r['step_ms']:.1f} ms, "
          f"{r['mem_peak_bytes']} bytes per rank (as plan memory); balanced {other['step_ms']:.1f}"
          f" ms, {other['mem_peak_bytes']} bytes")
    only = json.loads(run([tessel, "plan", "search", *args, "--stage-split", "balanced"],
                          env=env).stdout)
    if any(x["pp"] == 2 and x["pipeline_split"] for x in only["ranked"]):
        fail("--stage-split balanced ranked a split")
    # Interleaved: the split covers every chunk (pp x V counts, in order); where it differs from
    # the balanced chunks both rows are ranked, the split's with plan memory's figures, and for
    # two chunks per rank it is predicted faster (the traced compute weighs the head less than
    # its weights do, as for 1F1B).
    args[args.index("1f1b")] = "interleaved"
    args[args.index("--global-batch") + 1] = "4"
    res = json.loads(run([tessel, "plan", "search", *args], env=env).stdout)
    rows = [r for r in res["ranked"] if r["pp"] == 2]
    split = [r for r in rows if r["pipeline_split"]]
    if not split:
        fail(f"124M pp 2 interleaved: no DP split ranked: {[r['layout'] for r in rows]}")
    for r in split:
        v = int(r["schedule"].split(":")[1])
        if len(r["pipeline_split"].split(",")) != 2 * v:
            fail(f"{r['layout']}: the split does not give {2 * v} chunks")
        m = json.loads(run([tessel, "plan", "memory", "--model", "124M", "--cluster", cluster,
                            "--json", "--pp", "2", "--schedule", r["schedule"], "--grad-accum",
                            "4", "--seq", "1024", "--pipeline-split", r["pipeline_split"]],
                           env=env).stdout)
        if m["mem_peak_bytes"] != r["mem_peak_bytes"] or abs(m["step_ms"] - r["step_ms"]) > \
                1e-9 * r["step_ms"]:
            fail(f"{r['layout']}: search {r['mem_peak_bytes']} bytes {r['step_ms']} ms, plan "
                 f"memory {m['mem_peak_bytes']} bytes {m['step_ms']} ms")
        balanced = [x for x in rows if x["schedule"] == r["schedule"] and not x["pipeline_split"]]
        if len(balanced) != 1:
            fail(f"{r['layout']}: {len(balanced)} balanced rows beside the split")
        print(f"124M pp 2 {r['schedule']}: split {r['pipeline_split']} {r['step_ms']:.0f} ms, "
              f"balanced {balanced[0]['step_ms']:.0f} ms")
    if not any(r["schedule"] == "interleaved:2" and r["step_ms"] < b["step_ms"]
               for r in split for b in rows
               if b["schedule"] == "interleaved:2" and not b["pipeline_split"]):
        fail("124M pp 2 interleaved:2: the DP's split is not faster than the balanced chunks")


def plan_file_rows(tessel, config, cluster, res, plan, what, env):
    """The ranked tp 2 rows searched with the plan file PLAN (as many as with the built-in plan)
    and the built-in plan's; the first row's figures must be `plan memory --tp-plan PLAN`'s."""
    rows = [r for r in res["ranked"] if r["tp"] == 2 and r["tp_plan"] == plan]
    builtin = [r for r in res["ranked"] if r["tp"] == 2 and r["tp_plan"] == ""]
    if not rows or len(rows) != len(builtin):
        fail(f"{what}: {len(rows)} tp layouts with {plan}, {len(builtin)} with the built-in plan")
    r = rows[0]
    m = json.loads(run([tessel, "plan", "memory", "--model", config, "--cluster", cluster,
                        "--json", "--dp", str(r["dp"]), "--tp", "2", "--tp-plan", plan, "--zero",
                        str(r["zero_stage"]), "--recompute", r["recompute"], "--micro-batch",
                        str(r["micro_batch"]), "--grad-accum", str(r["grad_accum"]), "--seq",
                        "15"], env=env).stdout)
    if m["mem_peak_bytes"] != r["mem_peak_bytes"] or abs(m["step_ms"] - r["step_ms"]) > \
            1e-9 * r["step_ms"]:
        fail(f"{r['layout']}: search {r['mem_peak_bytes']} bytes {r['step_ms']} ms, plan memory "
             f"--tp-plan {m['mem_peak_bytes']} bytes {m['step_ms']} ms")
    return r, builtin


def tp_plan_files(tessel, config, cluster, work, env):
    """`--tp-plan FILE` searches a plan file beside the built-in plan: a plan that splits only the
    MLP (the attention replicated) gives tp layouts of its own, named and flagged with the file,
    with `plan memory --tp-plan`'s figures; a plan the runtime refuses is one invalid entry with
    its reason."""
    mlp = write_json(os.path.join(work, "mlp-only-tp.json"),
                     {"wte": "VocabParallel", "h.*.mlp.c_fc": "Colwise",
                      "h.*.mlp.c_proj": "Rowwise",
                      "ln_f": {"style": "Sequence", "gather_output": True}})
    broken = write_json(os.path.join(work, "broken-tp.json"), {"h.*.mlp.c_fc": "Diagonal"})
    res = json.loads(search(tessel, config, cluster, env,
                            extra=["--tp-plan", mlp, "--tp-plan", broken, "--top", "1000",
                                   "--sequence-parallel", "off", "--recompute", "none"]).stdout)
    r, builtin = plan_file_rows(tessel, config, cluster, res, mlp, "--tp-plan", env)
    if r["train_args"][-2:] != ["--set", f"parallel.tp_plan={mlp}"]:
        fail(f"{r['layout']}: train_args {r['train_args']} without its plan")
    twin = [b for b in builtin if b["layout"] == r["layout"].replace(f" tp_plan={mlp}", "")][0]
    if twin["mem_peak_bytes"] == r["mem_peak_bytes"]:
        fail(f"{mlp}: the same bytes per rank as the built-in plan ({r['mem_peak_bytes']}); the "
             f"replicated attention should cost more")
    bad = [x for x in res["pruned"] if x.get("tp_plan") == broken]
    if len(bad) != 1 or bad[0]["status"] != "invalid" or "Diagonal" not in bad[0]["reason"]:
        fail(f"{broken}: expected one invalid entry naming the bad style, got {bad}")
    print(f"--tp-plan {os.path.basename(mlp)}: {r['layout']} {r['step_ms']:.3f} ms, "
          f"{r['mem_peak_bytes']} bytes per rank (built-in plan: {twin['step_ms']:.3f} ms, "
          f"{twin['mem_peak_bytes']} bytes), as plan memory; {os.path.basename(broken)}: "
          f"{bad[0]['reason'][:90]}")


def shard_plans_searched(tessel, config, cluster, work, env):
    """`--shard-plans DIR` solves the sharding ILP for tp 2 (the only tp of two devices) at each
    micro-batch of its layouts (1, 2, 3 and 6 of the 6 rows), writes each distinct plan (DIR/tp2.json
    when they agree, tp2-mbM.json each otherwise: here one for micro-batch 1, which keeps attention
    whole, one for 2, 3 and 6) — the rules `tessel plan shard` writes for each of those
    micro-batches, with an about line naming them — and searches it beside the built-in plan with
    those layouts only, with `plan memory --tp-plan`'s figures."""
    folder = os.path.join(work, "shard-plans")
    shutil.rmtree(folder, ignore_errors=True)
    p = search(tessel, config, cluster, env,
               extra=["--shard-plans", folder, "--top", "1000", "--sequence-parallel", "off",
                      "--recompute", "none"])
    files = re.findall(r"sharding ILP's plan for tp 2 \(micro-batch(?:es)? ([0-9, ]+)\): (\S+)",
                       p.stderr)
    covered = sorted(int(mb) for mbs, _ in files for mb in mbs.split(", "))
    if covered != [1, 2, 3, 6]:
        fail(f"--shard-plans: micro-batches {covered} reported, expected 1, 2, 3, 6: "
             f"{p.stderr[-1000:]}")
    res = json.loads(p.stdout)
    plans = []
    for mbs, plan in files:
        mbs = [int(mb) for mb in mbs.split(", ")]
        want = os.path.join(folder, "tp2.json" if len(files) == 1 else f"tp2-mb{mbs[0]}.json")
        if plan != want or not os.path.exists(plan):
            fail(f"--shard-plans: {plan} reported, expected {want}")
        with open(plan) as f:
            text = f.read()
        written = json.loads(text)
        about = written.pop("# about")
        named = f"micro-batches {', '.join(map(str, mbs))} x" if len(mbs) > 1 else \
            f"batch {mbs[0]} x"
        if named not in about:
            fail(f"{plan}: its about line does not name {named!r}: {about}")
        for mb in mbs:
            direct = json.loads(run([tessel, "plan", "shard", "--model", config, "--tp", "2",
                                     "--batch", str(mb), "--seq", "15", "--cluster", cluster],
                                    env=env).stdout)
            direct.pop("# about")
            if written != direct:
                fail(f"{plan} differs from `tessel plan shard --tp 2 --batch {mb}`'s plan:\n"
                     f"{direct}")
        plans.append(json.dumps(written, sort_keys=True))
        rows = [r for r in res["ranked"] + res["pruned"] if r.get("tp_plan") == plan]
        if not rows or any(r["micro_batch"] not in mbs for r in rows):
            fail(f"{plan}: searched with micro-batches "
                 f"{sorted({r['micro_batch'] for r in rows})}, solved for {mbs}")
        ranked = [r for r in res["ranked"] if r["tp"] == 2 and r["tp_plan"] == plan]
        if ranked:
            r = ranked[0]
            m = json.loads(run([tessel, "plan", "memory", "--model", config, "--cluster",
                                cluster, "--json", "--dp", str(r["dp"]), "--tp", "2",
                                "--tp-plan", plan, "--zero", str(r["zero_stage"]),
                                "--recompute", r["recompute"], "--micro-batch",
                                str(r["micro_batch"]), "--grad-accum", str(r["grad_accum"]),
                                "--seq", "15"], env=env).stdout)
            if m["mem_peak_bytes"] != r["mem_peak_bytes"] or \
                    abs(m["step_ms"] - r["step_ms"]) > 1e-9 * r["step_ms"]:
                fail(f"{r['layout']}: search {r['mem_peak_bytes']} bytes {r['step_ms']} ms, plan "
                     f"memory --tp-plan {m['mem_peak_bytes']} bytes {m['step_ms']} ms")
            print(f"--shard-plans: {os.path.basename(plan)} (micro-batches {mbs}): "
                  f"{r['layout']} {r['step_ms']:.3f} ms, {r['mem_peak_bytes']} bytes per rank, "
                  f"as plan memory; the plan: {' '.join(text.split())[:160]}")
    if not any(r["tp"] == 2 and r["tp_plan"] in {f for _, f in files} for r in res["ranked"]):
        fail("--shard-plans: no layout with the ILP's plan ranked")
    if len(set(plans)) != len(plans):
        fail("--shard-plans: two files hold the same plan")
    # On this model the ILP keeps attention whole at one sequence per micro-batch and splits it
    # from two on: two plans.
    if len(plans) != 2 or files[0][0] != "1":
        fail(f"--shard-plans: expected one plan for micro-batch 1 and one for 2, 3, 6: {files}")


def shard_plans_searched_with_sp(tessel, config, cluster, work, env):
    """Under sequence parallelism `--shard-plans DIR` solves the ILP with the styles' sequence
    transitions: one file, DIR/tp2-sp.json (the runtime's styles leave no other split under --sp,
    so every micro-batch agrees), holding `tessel plan shard --sp`'s rules with the Sequence
    modules, searched with the sp layouts only, each ranked row with the figures of the built-in
    plan's same layout (the same split)."""
    folder = os.path.join(work, "shard-plans-sp")
    shutil.rmtree(folder, ignore_errors=True)
    p = search(tessel, config, cluster, env,
               extra=["--shard-plans", folder, "--top", "1000", "--sequence-parallel", "on",
                      "--recompute", "none"])
    files = re.findall(r"sharding ILP's plan for tp 2 with sequence parallelism "
                       r"\(micro-batch(?:es)? ([0-9, ]+)\): (\S+)", p.stderr)
    plan = os.path.join(folder, "tp2-sp.json")
    if [f for _, f in files] != [plan] or files[0][0] != "1, 2, 3, 6":
        fail(f"--shard-plans under sp: expected {plan} for micro-batches 1, 2, 3, 6: {files}\n"
             f"{p.stderr[-1000:]}")
    with open(plan) as f:
        written = json.load(f)
    if "with sequence parallelism" not in written.pop("# about"):
        fail(f"{plan}: its about line does not say it runs with --sp")
    direct = json.loads(run([tessel, "plan", "shard", "--model", config, "--tp", "2", "--batch",
                             "6", "--seq", "15", "--cluster", cluster, "--sp"], env=env).stdout)
    direct.pop("# about")
    if written != direct or written.get("h.*.ln_1") != "Sequence":
        fail(f"{plan}: {written}, `plan shard --sp`: {direct}")
    res = json.loads(p.stdout)
    rows = [r for r in res["ranked"] + res["pruned"] if r.get("tp_plan") == plan]
    if not rows or any(not r["sp"] for r in rows):
        fail(f"{plan}: searched with layouts without sp: {[r['layout'] for r in rows]}")
    ranked = [r for r in res["ranked"] if r.get("tp_plan") == plan]
    if not ranked:
        fail(f"{plan}: no layout ranked: {[(r['layout'], r.get('reason')) for r in rows][:3]}")
    for r in ranked:
        same = [b for b in res["ranked"] if not b["tp_plan"] and b["tp"] == 2 and b["sp"] and
                b["layout"] == r["layout"].replace(f" tp_plan={plan}", "")]
        if len(same) != 1 or same[0]["mem_peak_bytes"] != r["mem_peak_bytes"] or \
                abs(same[0]["step_ms"] - r["step_ms"]) > 1e-9 * r["step_ms"]:
            fail(f"{r['layout']}: {r['mem_peak_bytes']} bytes {r['step_ms']} ms, the built-in "
                 f"plan's {[(b['mem_peak_bytes'], b['step_ms']) for b in same]}")
    print(f"--shard-plans under sp: {os.path.basename(plan)} ranked in {len(ranked)} layouts, "
          f"each as the built-in plan's")


def auto_equals_explicit(tessel, mpirun, cluster, sets, steps, best, res, work, tag, env):
    """`train --plan auto` runs the search's best plan for the launch, and the printed explicit
    flags give the same losses and gradient norms; both JSONL carry the plan's prediction."""
    auto_dir = os.path.join(work, re.sub(r"\W+", "_", tag) + "auto")
    p = run(mpi_prefix(mpirun) + ["-np", "2", tessel, "train", "--plan", "auto", "--cluster",
                                  cluster] + sets + ["--set", "checkpoint.dir=" + auto_dir],
            env=env)
    m = re.search(r"# plan auto: (.*?), predicted .* \(tessel train (.*)\)", p.stdout)
    if not m:
        fail(f"no plan line in:\n{p.stdout[:2000]}")
    if m.group(1) != best["layout"]:
        fail(f"--plan auto chose {m.group(1)}, the search's best is {best['layout']}")
    flags = m.group(2).split()
    if flags != res["train_args"]:
        fail(f"--plan auto's flags {flags} differ from the search's {res['train_args']}")
    explicit_dir = os.path.join(work, re.sub(r"\W+", "_", tag) + "explicit")
    run(mpi_prefix(mpirun) + ["-np", "2", tessel, "train", "--cluster", cluster] + sets +
        flags + ["--set", "checkpoint.dir=" + explicit_dir], env=env)
    a, b = step_records(auto_dir), step_records(explicit_dir)
    if len(a) != steps or len(b) != steps:
        fail(f"{len(a)} and {len(b)} step records, expected {steps}")
    for x, y in zip(a, b):
        if x["loss"] != y["loss"] or x["grad_norm"] != y["grad_norm"]:
            fail(f"step {x['step']}: --plan auto loss {x['loss']!r} norm {x['grad_norm']!r}, "
                 f"explicit flags {y['loss']!r} {y['grad_norm']!r}")
        for rec, what in ((x, "auto"), (y, "explicit")):
            pr = rec.get("predicted")
            if not pr:
                fail(f"{what} step {rec['step']}: no prediction in the JSONL")
            if pr["layout"] != best["layout"] or pr["mem_peak_bytes"] != best["mem_peak_bytes"]:
                fail(f"{what}: predicted {pr}, the search said {best}")
            if abs(pr["step_ms"] - best["step_ms"]) > 1e-9 * best["step_ms"]:
                fail(f"{what}: predicted step {pr['step_ms']} ms vs {best['step_ms']}")
            if len(pr["measured_peak_bytes"]) != 2:
                fail(f"{what}: measured peaks {pr['measured_peak_bytes']}, expected 2 ranks")
    last = b[-1]["predicted"]
    print(f"{tag}--plan auto equals the explicit flags over {steps} steps; last step: predicted "
          f"{last['step_ms']:.3f} ms vs measured {b[-1]['step_ms']:.3f} ms, predicted peak "
          f"{last['mem_peak_bytes']} vs measured {last['measured_peak_bytes']} bytes "
          f"(error {100 * last['mem_peak_error']:+.2f}%)")


def main():
    tessel, mpirun, work = sys.argv[1:4]
    env = single_thread_env()
    try:
        vocab = prepare_workdir(tessel, work)
        config = write_json(os.path.join(work, "config.json"), gpt2_config(vocab, 32, 36, 3, 4))
        data = os.path.join(work, "data")
        roomy = write(os.path.join(work, "roomy.toml"), NODE.format(memory=1 << 40))
        every = json.loads(search(tessel, config, roomy, env).stdout)
        peaks = sorted(r["mem_peak_bytes"] for r in every["ranked"])
        memory = peaks[len(peaks) // 2]
        cluster = write(os.path.join(work, "node.toml"), NODE.format(memory=memory))
        res = json.loads(search(tessel, config, cluster, env).stdout)
        for r in res["ranked"]:
            if r["mem_peak_bytes"] > memory:
                fail(f"ranked {r['layout']} needs {r['mem_peak_bytes']} > {memory}")
        oom = [r for r in res["pruned"] if r["status"] == "out of memory"]
        if not oom or any(r["mem_peak_bytes"] <= memory for r in oom):
            fail(f"out-of-memory layouts wrong at {memory} bytes: {oom}")
        fastest_free = every["ranked"][0]
        best = res["ranked"][0]
        print(f"node of {memory} bytes: best {best['layout']} ({best['step_ms']:.3f} ms, "
              f"{best['mem_peak_bytes']} bytes); without the bound {fastest_free['layout']}; "
              f"{len(oom)} out of memory")
        # The table: the best layout's command, and tp/pp named as not modelled.
        table = run([tessel, "plan", "search", "--model", config, "--cluster", cluster,
                     "--global-batch", "6", "--seq", "15"], env=env).stdout
        print(table)
        if ("# best: mpirun -np 2 tessel train " + " ".join(res["train_args"])) not in table:
            fail("the table lacks the best plan's command")
        if "out of memory: needs" not in table:
            fail("the table does not say why layouts were not ranked")
        # Bare `tessel plan` with the search's options prints the same table; without them it
        # says what it needs in one line; its help lists the subcommands.
        bare = run([tessel, "plan", "--model", config, "--cluster", cluster,
                    "--global-batch", "6", "--seq", "15"], env=env).stdout
        if bare != table:
            fail(f"`tessel plan` printed\n{bare}\nbut `tessel plan search`\n{table}")
        p = subprocess.run([tessel, "plan"], capture_output=True, text=True, env=env)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        if p.returncode == 0 or len(lines) != 1 or "--global-batch" not in lines[0]:
            fail(f"bare `tessel plan`: exit {p.returncode}, stderr {p.stderr!r}")
        helptext = run([tessel, "plan", "--help"], env=env).stdout
        for sub in ("search", "memory", "trace", "shard", "calibrate"):
            if sub not in helptext:
                fail(f"`tessel plan --help` does not list `{sub}`:\n{helptext}")
        roomy_all = json.loads(search(tessel, config, roomy, env, extra=["--top", "1000"]).stdout)
        check_against_plan_memory(tessel, config, roomy, roomy_all, env)
        rank_recompute_against_plan_memory(tessel, config, roomy_all, work, env)
        dp_split_against_plan_memory(tessel, roomy, env)
        tp_plan_files(tessel, config, roomy, work, env)
        shard_plans_searched(tessel, config, roomy, work, env)
        shard_plans_searched_with_sp(tessel, config, roomy, work, env)

        steps = 6
        sets = train_sets(config, data, steps, 15, [
            "train.micro_batch=3", "checkpoint.interval=0", "log.interval=1",
            "machine.peak_gflops=1"])
        auto_equals_explicit(tessel, mpirun, cluster, sets, steps, best, res, work, "", env)
        # One sequence per step: dp 2 is invalid, so --plan auto runs a tp or a pp layout.
        one = json.loads(search(tessel, config, cluster, env, batch=1).stdout)
        one_best = one["ranked"][0]
        if one_best["dp"] != 1:
            fail(f"global batch 1: best {one_best['layout']}")
        auto_equals_explicit(tessel, mpirun, cluster, sets + ["--set", "train.global_batch=1"],
                             steps, one_best, one, work, one_best["layout"] + ": ", env)

        # Nothing fits: one message naming the least memory per rank.
        tiny = write(os.path.join(work, "tiny.toml"), NODE.format(memory=10000))
        p = search(tessel, config, tiny, env, check=False)
        least = min(r["mem_peak_bytes"] for r in json.loads(p.stdout.splitlines()[0])["pruned"]
                    if r["status"] == "out of memory")
        for q in (p, subprocess.run(mpi_prefix(mpirun) + ["-np", "2", tessel, "train", "--plan",
                                                          "auto", "--cluster", tiny] + sets +
                                    ["--set", "checkpoint.dir=" + os.path.join(work, "none")],
                                    capture_output=True, text=True, env=env)):
            msg = re.search(r"the least it needs is .*? \((\d+) bytes\) per rank", q.stderr)
            if q.returncode == 0 or not msg or int(msg.group(1)) != least:
                fail(f"impossible request: exit {q.returncode}, least {least}, stderr {q.stderr!r}")
        print("impossible request:", p.stderr.strip().splitlines()[-1][:300])

        # Malformed cluster files name the key.
        bad = {"'device.memory'": NODE.format(memory=1 << 30).replace(
                   "memory_bandwidth", "memory = 5\nmemory_bandwidth"),
               "links.intra_node.latency": NODE.format(memory=1 << 30).replace(
                   "latency = 3e-6", 'latency = "fast"')}
        for key, text in bad.items():
            path = write(os.path.join(work, "bad.toml"), text)
            for q in (search(tessel, config, path, env, check=False),
                      subprocess.run([tessel, "train", "--plan", "auto", "--cluster", path] + sets,
                                     capture_output=True, text=True, env=env)):
                if q.returncode == 0 or key not in q.stderr or "bad.toml" not in q.stderr:
                    fail(f"malformed cluster ({key}): exit {q.returncode}, stderr {q.stderr!r}")
            print(f"malformed cluster: {q.stderr.strip().splitlines()[-1][:200]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
