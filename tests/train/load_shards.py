#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Loading reads only local shards (docs/PARALLEL.md, "Construction without materialisation"): a
Hugging Face model directory given as model.init_from is loaded at tp 2, pp 2 and dp 2 ZeRO-3, and
each rank reads only the byte ranges of what it holds.

The model: GPT-2 384 x 4 with GPT-2's 50257-token vocabulary (26.4 M parameters, 101 MiB of f32),
written by `tessel init` in the Hugging Face layout (Conv1D weights stored transposed). Each layout
trains one step whose update is skipped (fault.nan_at_step=1 puts a NaN in a gradient: no rank
updates), so the run's final checkpoint holds the parameters as loaded. Checked for every layout:
  - the Hugging Face model the checkpoint exports, assembled from every rank's pieces, equals the
    source tensor for tensor, bit for bit (what loading at one rank and then sharding gives);
  - each rank's resident set while the model is built and loaded (the "build" record: its peak
    after, VmHWM, minus its resident set before) stays within 1.15 x the parameters it holds +
    LOAD_OVERHEAD, in every layout. Reading whole tensors, as before, cost every rank the
    whole 101 MiB; so did the tensor-parallel cut and ZeRO-3's partition while they copied from
    the whole tensors the model was built with (never written, but read: pages read become
    resident), before they learnt to leave the values to the loader.

Label "heavy": 6 processes, ~25 s of CPU on 2 cores. Usage: load_shards.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, train_sets, write_json)

MIB = 1 << 20
# docs/PARALLEL.md: what building and loading add beside the parameters a rank holds (the model's
# small tensors from the heap, the checkpoint's header, the pipeline's and ZeRO's bookkeeping).
LOAD_OVERHEAD = 24 * MIB
SLACK = 1.15
# (dp, tp, pp, zero_stage)
LAYOUTS = [(1, 2, 1, 0), (1, 1, 2, 0), (2, 1, 1, 3)]


def raw_tensors(path):
    """name -> (dtype, shape, bytes) of a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    prepare_workdir(tessel, work)
    env = single_thread_env()
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(50257, n_positions=32, n_embd=384, n_layer=4, n_head=6))
    source = os.path.join(work, "hf")
    run([tessel, "init", "--config", config, "--out", source, "--seed", "5"], env=env)
    want = raw_tensors(os.path.join(source, "model.safetensors"))
    rows = ["| layout | rank | RSS before | peak after | increase | params held | bound |",
            "|---|---|---|---|---|---|---|"]
    problems = []
    for dp, tp, pp, zero in LAYOUTS:
        what = f"(dp {dp}, tp {tp}, pp {pp}) ZeRO-{zero}"
        d = os.path.join(work, f"dp{dp}_tp{tp}_pp{pp}_zero{zero}")
        world = dp * tp * pp
        run(mpi_prefix(mpirun) + ["-np", str(world), tessel, "train"] +
            train_sets(config, os.path.join(work, "data"), 1, seq_len=16,
                       extra=[f"model.init_from={source}", "fault.nan_at_step=1", "optim.warmup_steps=1",
                              f"train.micro_batch={2 // dp}", f"parallel.zero_stage={zero}",
                              "checkpoint.dir=" + d]) +
            ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp)], env=env)
        got = raw_tensors(os.path.join(d, "step_000001", "model.safetensors"))
        if sorted(got) != sorted(want):
            problems.append(f"{what}: exported tensors {sorted(set(got) ^ set(want))} differ")
        for name in sorted(set(got) & set(want)):
            if got[name] != want[name]:
                problems.append(f"{what}: {name} as loaded differs from the source")
        with open(os.path.join(d, "train.jsonl")) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        build = [r for r in recs if r.get("checkpoint_event") == "build"]
        steps = [r for r in recs if "step" in r]
        if len(build) != 1 or len(steps) != 1 or not steps[0].get("skipped"):
            fail(f"{what}: expected one build record and one skipped step in train.jsonl")
        for r in range(world):
            b, s = build[0]["ranks"][r], steps[0]["ranks"][r]
            increase = b["peak_rss_after_bytes"] - b["rss_before_bytes"]
            bound = SLACK * s["param_bytes"] + LOAD_OVERHEAD
            rows.append(f"| {what} | {r} | {b['rss_before_bytes'] / MIB:.0f} | "
                        f"{b['peak_rss_after_bytes'] / MIB:.0f} | {increase / MIB:.0f} | "
                        f"{s['param_bytes'] / MIB:.0f} | {bound / MIB:.0f} |")
            if increase > bound:
                problems.append(f"{what} rank {r}: loading raised the resident set by "
                                f"{increase / MIB:.0f} MiB, above 1.15 x the {s['param_bytes'] / MIB:.0f}"
                                f" MiB it holds + {LOAD_OVERHEAD // MIB} MiB")
        shutil.rmtree(d)
    print("\n".join(rows))
    shutil.rmtree(work)
    if problems:
        fail("\n".join(problems))


if __name__ == "__main__":
    main()
