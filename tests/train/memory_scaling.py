#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory that scales (docs/PARALLEL.md, "Memory per rank"): each rank builds only its share of the
model and its real peak resident set (VmHWM, from train.jsonl) stays within the ZeRO formula.

A GPT-2 whose memory is dominated by its state (width WIDTH, LAYERS blocks, GPT-2's 50257-token
vocabulary: ~P parameters, printed) trains 2 steps in each layout: one process, dp 2 ZeRO-3, tp 2,
pp 2 and (dp 2, pp 2) ZeRO-3. For every rank:
  - build: the peak resident set after the model is built and cut into the layout (the "build"
    record) is at most 1.15 x the parameters it holds + OVERHEAD: no rank materialises what it
    does not own (before construction without materialisation, every rank built the whole model);
    and what building added to the resident set (that peak minus the resident set before) is at
    most 1.15 x those parameters + BUILD_OVERHEAD: no axis holds a transient copy of the whole
    model while it cuts (the tensor-parallel cut and ZeRO-3's partition used to read the whole
    tensors they cut from, 1-1.5 x the whole model's f32 parameters for a moment);
  - training: the peak after the last step is at most 1.15 x (its formula state + its measured
    step peak: activations, gradients and temporaries) + OVERHEAD, ZeRO-3 included (its per-unit
    gathers used to leave heap holes resident: 1.3-1.6 x the stage's f32 parameters more).
OVERHEAD is the documented fixed cost of a process that holds no model: the runtime, its libraries,
MPI's buffers, the dataset's mapping (measured with a 16-wide model: docs/PARALLEL.md).

Then a model whose whole f32 parameters exceed any rank's share (GPT-2 1024 x 8 with the byte-level
vocabulary: 101 M parameters, 404 MB of f32 weights, made of blocks so that no tied embedding is held
whole by a stage) is built and trained one step on 4 ranks, (dp 2, pp 2) ZeRO-3: every rank's peak
after building stays below half the whole model's f32 parameters, and its training peak within the
same bound as above.

Heavy (label "heavy"): 13 processes of 0.1-0.6 GB each, ~60 s of CPU on 2 cores; each run ends
with the usual checkpoint.

With LAYERS (the CTest train.memory_scaling_layers): a deep narrow GPT-2 in the proportions of GPT-2
355M's blocks (24 blocks of width 384, the byte-level vocabulary: 42.5 M parameters, 162 MiB of f32
weights, almost all in blocks, so every axis divides the state) trains 2 steps at one process, dp 2
ZeRO-3, tp 2 and pp 2. Every rank is held to the same bounds as above, and every rank of the
parallel layouts must also peak at most MARGIN x the one-process peak: the formula halves the
state, and the margin leaves room for the fixed overhead of a process, ZeRO-3's gathered units and
buckets and the activations, which do not halve (measured: docs/PARALLEL.md, Memory per rank).
61 s at load average ~6 on two cores (7 min at 18), ~1.2 GB at once.

Usage: memory_scaling.py TESSEL MPIRUN WORKDIR [LAYERS]
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir,  # noqa: E402
                         remove_workdir, run, single_thread_env, train_sets, write_json)

MIB = 1 << 20
OVERHEAD = 128 * MIB  # docs/PARALLEL.md: a rank's resident set without a model (measured ~50 MiB)
# docs/PARALLEL.md: what building adds beside the parameters a rank holds (the model's small
# tensors from the heap, the axes' bookkeeping; as tests/train/load_shards.py allows).
BUILD_OVERHEAD = 24 * MIB
SLACK = 1.15
# (dp, tp, pp, zero_stage)
LAYOUTS = [(1, 1, 1, 0), (2, 1, 1, 3), (1, 2, 1, 0), (1, 1, 2, 0), (2, 1, 2, 3)]
# LAYERS: a rank of a 2-way layout peaks at most this fraction of one process's peak (measured
# 0.55-0.56 at tp 2 and pp 2; 0.79-0.80 at dp 2 ZeRO-3, whose step peak adds the gathered units and
# the gradient buckets beside the halved state: docs/PARALLEL.md). A layout that does not divide
# the state peaks at ~1.0 x or more.
MARGIN = {(2, 1, 1, 3): 0.85, (1, 2, 1, 0): 0.65, (1, 1, 2, 0): 0.65}


def records(run_dir):
    with open(os.path.join(run_dir, "train.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def parameters(vocab, width, layers, positions):
    return vocab * width + positions * width + layers * (12 * width * width + 13 * width) + 2 * width


def check_layout(tessel, mpirun, work, config, tag, layout, steps, whole_f32=None):
    """Runs LAYOUT for STEPS steps; checks every rank's build and training peaks; returns the table
    rows. With WHOLE_F32, every rank's peak after building must stay below half of it."""
    dp, tp, pp, zero = layout
    what = f"({dp},{tp},{pp}) ZeRO-{zero}"
    d = os.path.join(work, f"{tag}_dp{dp}_tp{tp}_pp{pp}_zero{zero}")
    world = dp * tp * pp
    common = ["train"] + train_sets(config, os.path.join(work, "data"), steps, seq_len=16,
                                    extra=["train.grad_accum=2", "checkpoint.interval=1000",
                                           "optim.warmup_steps=1"])
    cmd = (mpi_prefix(mpirun) + ["-np", str(world)] if world > 1 else []) + [tessel] + common + [
        "--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
        "--set", f"parallel.zero_stage={zero}", "--set", f"train.micro_batch={2 // dp}",
        "--set", "checkpoint.dir=" + d]
    run(cmd, env=single_thread_env())
    recs = records(d)
    build = [r for r in recs if r.get("checkpoint_event") == "build"]
    stepped = [r for r in recs if "step" in r]
    if len(build) != 1 or len(stepped) != steps:
        fail(f"{what}: expected one build record and {steps} steps in train.jsonl, got "
             f"{len(build)} and {len(stepped)}")
    built, last = build[0]["ranks"], stepped[-1]["ranks"]
    if len(built) != world or len(last) != world:
        fail(f"{what}: {len(built)} build and {len(last)} step entries for {world} ranks")
    rows = []
    peaks[layout] = [r["rss_peak_bytes"] for r in last]
    for r in range(world):
        b, s = built[r], last[r]
        held = s["param_bytes"]
        build_peak = b["peak_rss_after_bytes"]
        increase = build_peak - b["rss_before_bytes"]
        if increase > SLACK * held + BUILD_OVERHEAD:
            problems.append(f"{what} rank {r}: building raised the resident set by "
                            f"{increase / MIB:.0f} MiB, above 1.15 x the {held / MIB:.0f} MiB of "
                            f"parameters it holds + {BUILD_OVERHEAD // MIB} MiB: a transient copy")
        if build_peak > SLACK * held + OVERHEAD:
            problems.append(f"{what} rank {r}: peak resident set after building {build_peak / MIB:.0f} MiB "
                 f"exceeds 1.15 x the {held / MIB:.0f} MiB of parameters it holds + "
                 f"{OVERHEAD // MIB} MiB: it materialised what it does not own")
        bound = SLACK * (s["expected_state_bytes"] + s["step_peak_bytes"]) + OVERHEAD
        if s["rss_peak_bytes"] > bound:
            problems.append(f"{what} rank {r}: peak resident set {s['rss_peak_bytes'] / MIB:.0f} MiB above "
                 f"1.15 x (formula {s['expected_state_bytes'] / MIB:.0f} MiB + step peak "
                 f"{s['step_peak_bytes'] / MIB:.0f} MiB) + {OVERHEAD // MIB} MiB = "
                 f"{bound / MIB:.0f} MiB")
        if whole_f32 is not None and build_peak * 2 > whole_f32:
            problems.append(f"{what} rank {r}: {build_peak / MIB:.0f} MiB after building, not below half the "
                 f"whole model's {whole_f32 / MIB:.0f} MiB of f32 parameters")
        rows.append(f"| {what} | {r} | {build_peak / MIB:.0f} MiB | {increase / MIB:.0f} MiB | "
                    f"{held / MIB:.0f} MiB | "
                    f"{s['rss_peak_bytes'] / MIB:.0f} MiB | {s['expected_state_bytes'] / MIB:.0f} "
                    f"MiB | {s['step_peak_bytes'] / MIB:.0f} MiB | {bound / MIB:.0f} MiB |")
    return rows


problems = []
peaks = {}  # layout -> every rank's peak resident set after the last step
HEADER = ["| layout | rank | build peak | build increase | params held | step peak RSS | "
          "formula state | step peak (allocator) | bound |", "|---|---|---|---|---|---|---|---|---|"]


def check_layers(tessel, mpirun, work, vocab):
    """24 narrow blocks at one process, dp 2 ZeRO-3, tp 2 and pp 2: the bounds, and every parallel
    rank at most MARGIN x the one-process peak."""
    width, depth = 384, 24
    config = write_json(os.path.join(work, "layers.json"),
                        gpt2_config(vocab, n_positions=32, n_embd=width, n_layer=depth, n_head=6))
    p = parameters(vocab, width, depth, 32)
    print(f"GPT-2 {width} x {depth}, vocabulary {vocab}: {p / 1e6:.1f} M parameters, "
          f"{4 * p / MIB:.0f} MiB of f32 weights")
    rows = []
    for layout in LAYOUTS[:4]:
        rows += check_layout(tessel, mpirun, work, config, "layers", layout, 2)
    print("\n".join(HEADER + rows))
    one = peaks[LAYOUTS[0]][0]
    for layout in LAYOUTS[1:4]:
        for r, peak in enumerate(peaks[layout]):
            print(f"{layout} rank {r}: {peak / MIB:.0f} MiB = {peak / one:.2f} x one process's "
                  f"{one / MIB:.0f} MiB (at most {MARGIN[layout]})")
            if peak > MARGIN[layout] * one:
                problems.append(f"{layout} rank {r}: peak resident set {peak / MIB:.0f} MiB above "
                                f"{MARGIN[layout]} x one process's {one / MIB:.0f} MiB: the layout "
                                f"does not divide the memory")


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    if len(sys.argv) > 4 and sys.argv[4] == "LAYERS":
        check_layers(tessel, mpirun, work, vocab)
        if problems:
            fail("\n".join(problems))
        remove_workdir(work)
        return
    header = HEADER
    # GPT-2's proportions, smaller: the 50257-token embedding is 2/3 of the parameters.
    width, layers = 384, 4
    config = write_json(os.path.join(work, "config.json"),
                        gpt2_config(50257, n_positions=32, n_embd=width, n_layer=layers, n_head=6))
    p = parameters(50257, width, layers, 32)
    print(f"GPT-2 {width} x {layers}, vocabulary 50257: {p / 1e6:.1f} M parameters; overhead "
          f"allowance {OVERHEAD // MIB} MiB")
    rows = []
    for layout in LAYOUTS:
        rows += check_layout(tessel, mpirun, work, config, "gpt2", layout, 2)
    print("\n".join(header + rows))
    # Blocks only (the byte-level vocabulary): no stage holds a large tied copy.
    width, layers = 1024, 8
    big = write_json(os.path.join(work, "big.json"),
                     gpt2_config(vocab, n_positions=32, n_embd=width, n_layer=layers, n_head=8))
    p = parameters(vocab, width, layers, 32)
    print(f"GPT-2 {width} x {layers}, vocabulary {vocab}: {p / 1e6:.1f} M parameters, "
          f"{4 * p / MIB:.0f} MiB of f32 weights")
    print("\n".join(header + check_layout(tessel, mpirun, work, big, "big", (2, 1, 2, 3), 1,
                                          whole_f32=4 * p)))
    if problems:
        fail("\n".join(problems))
    remove_workdir(work)


if __name__ == "__main__":
    main()
