#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checkpoints stream on every rank (docs/TRAINING.md, Checkpoints > Memory): at dp 2 ZeRO-3, tp 2
and pp 2, saving a checkpoint and resuming from it raise each rank's resident set by at most the
documented staging bound (64 MiB per process) plus the tolerance the one-process test allows
(64 MiB: the piece index's JSON, heap bookkeeping, page tables), never by a copy of the state.

For each layout, GPT-2 WIDTH x LAYERS with the byte-level vocabulary trains one step (the final
save), then a new run resumes it (the load) and trains a second step (another save). From the
JSONL's save and load records, for every rank: what the operation added (its sampled peak resident
set minus the larger of the resident sets before and after) is within the bound. The model is
large enough that a copy of any rank's state (parameters and moments, from the step records)
would exceed the bound twice over: the test fails if it is not.

~0.6 GB per rank, 2 ranks at a time, ~1 GB written per run (removed after each layout).
Usage: checkpoint_memory_ranks.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, train_sets, write_json)

MIB = 1 << 20
STAGING = 64 * MIB  # docs/TRAINING.md: what a save or load may buffer per process
TOLERANCE = 64 * MIB  # what is not a tensor (as tests/cli/checkpoint_memory_test.cpp allows)
WIDTH, LAYERS = 768, 8  # 57 M parameters, 0.9 GB of f32 state
# (dp, tp, pp, zero_stage)
LAYOUTS = [(2, 1, 1, 3), (1, 2, 1, 0), (1, 1, 2, 0)]


def records(run_dir):
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def added(rank):
    return rank["peak_rss_during_bytes"] - max(rank["rss_before_bytes"], rank["rss_after_bytes"])


def check_layout(tessel, mpirun, work, config, layout, problems):
    dp, tp, pp, zero = layout
    what = f"({dp},{tp},{pp}) ZeRO-{zero}"
    d = os.path.join(work, f"dp{dp}_tp{tp}_pp{pp}_zero{zero}")
    mpi = mpi_prefix(mpirun) + ["-np", str(dp * tp * pp)]
    axes = ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp)]
    first = train_sets(config, os.path.join(work, "data"), 1, seq_len=16,
                       extra=["train.grad_accum=2", f"train.micro_batch={2 // dp}",
                              "optim.warmup_steps=1", f"parallel.zero_stage={zero}",
                              "checkpoint.dir=" + d])
    run(mpi + [tessel, "train"] + first + axes, env=single_thread_env())
    resumed = run(mpi + [tessel, "train", "--resume", d, "--set", "train.steps=2"] + axes,
                  env=single_thread_env())
    if "checkpoint load at step 1" not in resumed.stdout:
        fail(f"{what}: the resumed run did not load step 1:\n{resumed.stdout[-2000:]}")
    recs = records(d)
    steps = [r for r in recs if "step" in r]
    events = [r for r in recs if r.get("checkpoint_event") in ("save", "load")]
    kinds = sorted(e["checkpoint_event"] for e in events)
    if len(steps) != 2 or kinds != ["load", "save", "save"]:
        fail(f"{what}: expected 2 steps, 2 saves and a load in train.jsonl, got {len(steps)} steps "
             f"and {kinds}")
    world = dp * tp * pp
    state = [s["state_bytes"] for s in steps[0]["ranks"]]
    params = [s["param_bytes"] for s in steps[0]["ranks"]]
    if len(state) != world or min(state) <= 2 * (STAGING + TOLERANCE):
        fail(f"{what}: the ranks' states {[s // MIB for s in state]} MiB are too small to show a "
             f"copy against {(STAGING + TOLERANCE) // MIB} MiB")
    rows = []
    for e in events:
        if len(e["ranks"]) != world:
            fail(f"{what}: {len(e['ranks'])} entries for {world} ranks: {e}")
        for r, m in enumerate(e["ranks"]):
            a = added(m)
            rows.append(f"| {what} | {e['checkpoint_event']} at step {e['checkpoint_step']} | {r} | "
                        f"{state[r] / MIB:.0f} | {m['rss_before_bytes'] / MIB:.0f} | "
                        f"{m['peak_rss_during_bytes'] / MIB:.0f} | {m['rss_after_bytes'] / MIB:.0f} | "
                        f"{a / MIB:.0f} |")
            if a > STAGING + TOLERANCE:
                problems.append(f"{what} rank {r}: the {e['checkpoint_event']} at step "
                                f"{e['checkpoint_step']} added {a / MIB:.0f} MiB to the resident "
                                f"set, above {STAGING // MIB} + {TOLERANCE // MIB} MiB")
            if m["rss_after_bytes"] < params[r]:
                problems.append(f"{what} rank {r}: {m['rss_after_bytes'] / MIB:.0f} MiB resident after "
                                f"the {e['checkpoint_event']}, below its {params[r] / MIB:.0f} MiB of "
                                "parameters: the measurement is not of this process")
    shutil.rmtree(d)
    return rows


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(vocab, n_positions=32, n_embd=WIDTH, n_layer=LAYERS, n_head=12))
    problems, rows = [], []
    for layout in LAYOUTS:
        rows += check_layout(tessel, mpirun, work, config, layout, problems)
    print("| layout | operation | rank | state | RSS before | peak during | after | added |\n"
          "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    if problems:
        fail("\n".join(problems))


if __name__ == "__main__":
    main()
