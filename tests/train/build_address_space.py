#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Construction without materialisation bounds a rank's address space, not only its resident set
(docs/PARALLEL.md, "Construction without materialisation"): the model is built shape-only and each
rank allocates only what it holds, so no rank ever reserves the whole model.

`tessel train --build-only` builds a GPT-2 made of blocks (the byte-level vocabulary, so no stage
holds a large tied copy) on 4 ranks, (dp 2, pp 2) ZeRO-3, and its "build" record gives every rank's
address-space peak (VmPeak) and the parameter bytes it holds (a quarter of the model's, about):

1. A 2-block model of width 64 built the same way gives each rank's address space without a model
   (the runtime, MPI, the libraries, thread stacks): BASE.
2. The large model (WIDTH x LAYERS, whole f32 parameters WHOLE), built without a cap: every rank's
   address-space peak is at most its BASE + 1.15 x the parameters it holds + SLACK. Before, the
   model was built whole on every rank (allocated and never written: no resident memory, but the
   whole model's address space), so this peak exceeded BASE + WHOLE.
3. Built again with every rank's address space capped by `ulimit -v` at CAP = the largest BASE +
   1.15 x the most any rank holds + SLACK, which must be below WHOLE (else the model is too small
   to prove anything and the test fails): the build succeeds. Before, every rank failed here.

~1.3 GB resident at once (4 ranks of a quarter of a 1.2 GB model), ~30 s on 2 cores.
Usage: build_address_space.py TESSEL MPIRUN WORKDIR
"""
import json
import os
import shlex
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from tessel_runs import (fail, gpt2_config, mpi_prefix, prepare_workdir, run,  # noqa: E402
                         single_thread_env, write_json)

MIB = 1 << 20
SLACK = 64 * MIB  # the axes' bookkeeping, the small tensors from the heap, a mapped block's cache
FACTOR = 1.15
WIDTH, LAYERS = 1536, 12  # ~340 M parameters, 1.27 GiB of f32 weights
LAYOUT = ["--dp", "2", "--pp", "2", "--set", "parallel.zero_stage=3"]


def build(tessel, mpirun, work, config, tag, cap=None):
    """Builds CONFIG on 4 ranks with --build-only (each rank's address space capped at CAP bytes
    when given); returns the build record's ranks."""
    d = os.path.join(work, tag)
    sets = [f"model.config={config}", f"data.dir={os.path.join(work, 'data')}", "train.steps=1",
            "train.seq_len=16", "train.micro_batch=1", "train.grad_accum=2", "optim.warmup_steps=0", "eval.interval=0",
            "sample.tokens=0", "checkpoint.dir=" + d]
    args = ["train", "--build-only"] + LAYOUT + [a for s in sets for a in ("--set", s)]
    rank = [tessel] + args
    if cap is not None:  # the cap on each rank, not on mpirun
        rank = ["sh", "-c", f"ulimit -v {cap // 1024} && exec " + " ".join(map(shlex.quote, rank))]
    p = run(mpi_prefix(mpirun) + ["-np", "4"] + rank, env=single_thread_env())
    if "done: model built" not in p.stdout:
        fail(f"{tag}: no 'done: model built' in the output:\n{p.stdout[-2000:]}")
    with open(os.path.join(d, "train.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    built = [r for r in recs if r.get("checkpoint_event") == "build"]
    if len(built) != 1 or len(built[0]["ranks"]) != 4 or any("step" in r for r in recs):
        fail(f"{tag}: expected one build record of 4 ranks and no step, got {recs}")
    return built[0]["ranks"]


def main():
    tessel, mpirun, work = sys.argv[1], sys.argv[2], sys.argv[3]
    vocab = prepare_workdir(tessel, work)
    tiny = write_json(os.path.join(work, "tiny.json"),
                      gpt2_config(vocab, n_positions=32, n_embd=64, n_layer=2, n_head=2))
    big = write_json(os.path.join(work, "big.json"),
                     gpt2_config(vocab, n_positions=32, n_embd=WIDTH, n_layer=LAYERS, n_head=12))
    whole = 4 * (vocab * WIDTH + 32 * WIDTH + LAYERS * (12 * WIDTH * WIDTH + 13 * WIDTH) + 2 * WIDTH)
    base = [r["peak_vm_after_bytes"] for r in build(tessel, mpirun, work, tiny, "tiny")]
    if min(base) <= 0:
        fail(f"no address-space peak in the build record: {base}")
    problems, rows = [], []
    ranks = build(tessel, mpirun, work, big, "uncapped")
    held = [r["param_bytes"] for r in ranks]
    if not all(0 < h < whole / 2 for h in held):
        fail(f"parameter bytes held {held}: each rank should hold about a quarter of {whole}")
    for r, (b, m) in enumerate(zip(base, ranks)):
        bound = b + FACTOR * held[r] + SLACK
        rows.append(f"| {r} | {b / MIB:.0f} | {held[r] / MIB:.0f} | {m['peak_vm_after_bytes'] / MIB:.0f} "
                    f"| {bound / MIB:.0f} | {m['peak_rss_after_bytes'] / MIB:.0f} |")
        if m["peak_vm_after_bytes"] > bound:
            problems.append(f"rank {r}: address space peaked at {m['peak_vm_after_bytes'] / MIB:.0f} "
                            f"MiB, above {b / MIB:.0f} MiB without a model + 1.15 x the "
                            f"{held[r] / MIB:.0f} MiB it holds + {SLACK // MIB} MiB")
    cap = int(max(base) + FACTOR * max(held) + SLACK)
    print(f"GPT-2 {WIDTH} x {LAYERS}, vocabulary {vocab}: whole f32 parameters {whole / MIB:.0f} MiB; "
          f"cap {cap / MIB:.0f} MiB per rank")
    print("| rank | VmPeak without a model | parameters held | VmPeak after building | bound | "
          "RSS peak after building |\n|---|---|---|---|---|---|\n" + "\n".join(rows))
    if problems:
        fail("\n".join(problems))
    if cap >= whole:
        fail(f"the cap {cap / MIB:.0f} MiB is not below the whole model's {whole / MIB:.0f} MiB: "
             "the model is too small to prove that no rank reserves it whole")
    capped = build(tessel, mpirun, work, big, "capped", cap=cap)
    print("capped build: VmPeak " + ", ".join(f"{m['peak_vm_after_bytes'] / MIB:.0f}" for m in capped)
          + " MiB")


if __name__ == "__main__":
    main()
